package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Kill points of the resume suite. A durable consumer runs in a child
// process (the "resume-session" child mode) and kills itself with SIGKILL
// at a named point:
//
//   - "after-persist": right after it persisted its session;
//   - "mid-replay@N": right after receiving its N-th event.
//
// The session is a record {table: checkpoint} in table "sessions",
// written with a synced commit, the way the broker persists a durable
// MQTT session.
func init() {
	childModes["resume-session"] = childResumeSession
}

// sessionArgs tells the child what to do; it is written next to the
// engine directory because childSpec carries only the engine's settings.
type sessionArgs struct {
	Table string `json:"table"`
	// Receive is how many events to take before persisting (0: until
	// killed).
	Receive int `json:"receive"`
	// AckFirst acknowledges the first AckFirst events (-1: all); AckOnly,
	// when set, acknowledges only those ordinals (0-based).
	AckFirst int   `json:"ack_first"`
	AckOnly  []int `json:"ack_only,omitempty"`
	// PersistEvery persists the checkpoint after every so many acks.
	PersistEvery int `json:"persist_every"`
	// U is a second table to subscribe to after receiving, which persists
	// the session (MQTT: a SUBSCRIBE on a resumed session).
	U      string `json:"u,omitempty"`
	KillAt string `json:"kill_at"`
}

const sessionTable, sessionID = "sessions", "s"

func argsPath(dir string) string { return strings.TrimRight(dir, "/") + ".args.json" }

type session map[string]table.Cursor

func readSession(ctx context.Context, db *table.DB) (session, error) {
	s := session{}
	rec, err := db.Get(ctx, sessionTable, sessionID)
	if errors.Is(err, table.ErrNotFound) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	return s, json.Unmarshal(rec.Value, &s)
}

func writeSession(ctx context.Context, db *table.DB, s session) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tx := db.Begin()
	if err := tx.Put(sessionTable, sessionID, b); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// killSelf ends the process the way a crash does: SIGKILL, no deferred
// cleanup, no flush.
func killSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {}
}

// killedBySignal reports whether a child ended by a signal (our SIGKILL)
// rather than by exiting.
func killedBySignal(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

func childResumeSession(spec childSpec) error {
	raw, err := os.ReadFile(argsPath(spec.Dir))
	if err != nil {
		return err
	}
	var a sessionArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := engine.Open(ctx, spec.Engine, engine.Options{Dir: spec.Dir, Params: spec.Params})
	if err != nil {
		return err
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	sess, err := readSession(ctx, db)
	if err != nil {
		return err
	}
	sub, err := db.Subscribe(ctx, table.SubscribeOptions{Table: a.Table, Start: sess[a.Table], IncludeSuperseded: true, Buffer: 100000})
	if err != nil {
		return err
	}
	persist := func() error {
		sess[a.Table] = sub.Checkpoint()
		if err := writeSession(ctx, db, sess); err != nil {
			return err
		}
		fmt.Printf("p %s %s\n", sess[a.Table], sub.Cursor())
		return nil
	}
	n, acks := 0, 0
	for a.Receive == 0 || n < a.Receive {
		var ev table.Event
		select {
		case ev = <-sub.Events():
		case <-ctx.Done():
			return ctx.Err()
		}
		fmt.Printf("d %s %d %d %d\n", ev.ID, ev.Key, ev.Index, ev.Version)
		ack := a.AckFirst < 0 || n < a.AckFirst
		if a.AckOnly != nil {
			ack = slices.Contains(a.AckOnly, n)
		}
		n++
		if ack {
			if err := sub.Ack(ev); err != nil {
				return err
			}
			if acks++; a.PersistEvery > 0 && acks%a.PersistEvery == 0 {
				if err := persist(); err != nil {
					return err
				}
			}
		}
		if a.KillAt == fmt.Sprintf("mid-replay@%d", n) {
			killSelf()
		}
	}
	if a.U != "" {
		h, err := db.Head(ctx)
		if err != nil {
			return err
		}
		su, err := db.Subscribe(ctx, table.SubscribeOptions{Table: a.U, Start: h, IncludeSuperseded: true})
		if err != nil {
			return err
		}
		defer su.Close()
		sess[a.U] = su.Checkpoint()
	}
	if err := persist(); err != nil {
		return err
	}
	if a.KillAt == "after-persist" {
		killSelf()
	}
	return nil
}

// childEvent is a delivery the child reported.
type childEvent struct {
	id      string
	at      at
	version table.Version
}

// runSessionChild closes the rig's engine, runs the child with a until it
// kills itself, reopens the engine and returns what the child reported.
func (r *rig) runSessionChild(a sessionArgs) (got []childEvent, persisted []string) {
	r.t.Helper()
	r.close()
	raw, _ := json.Marshal(a)
	if err := os.WriteFile(argsPath(r.dir), raw, 0o644); err != nil {
		r.t.Fatalf("write child args: %v", err)
	}
	c := startChild(r.t, childSpec{Mode: "resume-session", Engine: r.tg.Engine, Dir: r.dir, Params: r.tg.Params})
	lines := c.lines
	timeout := time.After(60 * time.Second)
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break read
			}
			f := strings.Fields(l)
			switch {
			case len(f) == 5 && f[0] == "d":
				k, _ := strconv.ParseUint(f[2], 10, 64)
				i, _ := strconv.ParseUint(f[3], 10, 32)
				v, _ := strconv.ParseUint(f[4], 10, 64)
				got = append(got, childEvent{id: f[1], at: at{engine.LogKey(k), uint32(i)}, version: table.Version(v)})
			case len(f) == 3 && f[0] == "p":
				persisted = append(persisted, f[1])
			}
		case <-timeout:
			c.kill()
			r.t.Fatalf("child did not reach its kill point in 60s; stderr: %s", c.stderr())
		}
	}
	<-c.Exited()
	if err := c.Err(); !killedBySignal(err) {
		r.t.Fatalf("child was to kill itself at %q, it ended with %v; stderr: %s", a.KillAt, err, c.stderr())
	}
	r.open()
	return got, persisted
}

// sessionCursor reads the persisted checkpoint of tbl.
func (r *rig) sessionCursor(tbl string) table.Cursor {
	r.t.Helper()
	s, err := readSession(r.t.Context(), r.db)
	if err != nil {
		r.t.Fatalf("read session: %v", err)
	}
	return s[tbl]
}

func (r *rig) persistSession(s session) {
	r.t.Helper()
	if err := writeSession(r.t.Context(), r.db, s); err != nil {
		r.t.Fatalf("write session: %v", err)
	}
}

// caseQueuedVsConsumed (C13): the persisted cursor is the acknowledged
// frontier, not what was queued. 50 records are pending; the consumer takes
// and acks 10 while the reader has queued the rest, subscribes to a second
// table (which persists the session), and the process is killed.
func caseQueuedVsConsumed(t T, tg Target) {
	r := newRig(t, tg)
	start := r.head()
	r.persistSession(session{"t": start})
	ws := r.pipelined("t", ids("r", 50))
	r.txn("u", "other")
	got, persisted := r.runSessionChild(sessionArgs{Table: "t", Receive: 10, AckFirst: 10, U: "u", KillAt: "after-persist"})
	if len(got) != 10 || len(persisted) != 1 {
		t.Fatalf("child received %d events and persisted %d times, want 10 and 1", len(got), len(persisted))
	}
	c := r.sessionCursor("t")
	if c != (table.Cursor{Key: ws[9].at.key}) {
		t.Fatalf("persisted cursor %s, want the ack frontier key(r10) = %d", c, ws[9].at.key)
	}
	wantIDs(t, "resume after the kill", r.replayAll(durableOpts("t", c)).events, ids("r", 50)[10:]...)
}

// scenarioPartialAck: one transaction writes r1..r3; the consumer
// receives all three, acknowledges the ordinals in acks, persists and is
// killed. The resume must deliver every unacknowledged record.
func scenarioPartialAck(t T, tg Target, acks []int) {
	r := newRig(t, tg)
	start := r.head()
	r.persistSession(session{"t": start})
	ws := r.txn("t", "r1", "r2", "r3")
	got, _ := r.runSessionChild(sessionArgs{Table: "t", Receive: 3, AckOnly: acks, KillAt: "after-persist"})
	if len(got) != 3 {
		t.Fatalf("child received %d events, want 3", len(got))
	}
	c := r.sessionCursor("t")
	again := r.replayAll(durableOpts("t", c))
	redelivered := map[string]bool{}
	for _, ev := range again.events {
		redelivered[ev.ID] = true
	}
	for i, w := range ws {
		if !slices.Contains(acks, i) && !redelivered[w.id] {
			t.Fatalf("after acking %v and a kill, resume from %s did not redeliver unacknowledged %s (got [%s])", acks, c, w.id, joined(eventIDs(again.events)))
		}
	}
	if r.granularity() == engine.PerTransaction && c != start {
		t.Fatalf("checkpoint moved to %s inside a partly acknowledged transaction", c)
	}
}

func casePartialAckInSharedKeyTransaction(t T, tg Target) { scenarioPartialAck(t, tg, []int{0}) }

func caseOutOfOrderAckInSharedKeyTransaction(t T, tg Target) { scenarioPartialAck(t, tg, []int{2}) }

// caseKillMidReplay (C16) kills a durable consumer in the middle of a
// replay. The note asks for 20,000 records; this uses 3,000 in transactions
// of random size 1..200 (the same shapes, a fifth of the time).
func caseKillMidReplay(t T, tg Target) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 16))
	r := newRig(t, tg)
	start := r.head()
	r.persistSession(session{"t": start})
	var groups [][]string
	for total := 0; total < 3000; {
		n := 1 + rng.IntN(200)
		perm := rng.Perm(300)[:n]
		tx := make([]string, n)
		for i, p := range perm {
			tx[i] = fmt.Sprintf("id%d", p)
		}
		groups = append(groups, tx)
		total += n
	}
	expected := r.putTxns("t", groups)
	killAt := 200 + rng.IntN(len(expected)-400)
	first, persisted := r.runSessionChild(sessionArgs{Table: "t", AckFirst: -1, PersistEvery: 50, KillAt: fmt.Sprintf("mid-replay@%d", killAt)})
	if len(first) != killAt {
		t.Fatalf("child reported %d deliveries before its kill at %d", len(first), killAt)
	}
	c := r.sessionCursor("t")
	if len(persisted) > 0 && persisted[len(persisted)-1] != c.String() {
		t.Fatalf("session holds %s, the child last persisted %s", c, persisted[len(persisted)-1])
	}
	second := r.replayAll(durableOpts("t", c))
	firstEvs := make([]table.Event, len(first))
	for i, ce := range first {
		firstEvs[i] = table.Event{ID: ce.id, Key: ce.at.key, Index: ce.at.idx, Version: ce.version}
	}
	ck := newResumeChecker(expected)
	if err := ck.delivered(firstEvs); err != nil {
		t.Fatalf("seed %d, first run: %v", seed, err)
	}
	if err := ck.stopped(c); err != nil {
		t.Fatalf("seed %d, kill at %d: %v", seed, killAt, err)
	}
	if err := ck.resumed(c, second.events, dupAny); err != nil {
		t.Fatalf("seed %d, kill at %d: %v", seed, killAt, err)
	}
	if err := ck.complete(); err != nil {
		t.Fatalf("seed %d, kill at %d: %v", seed, killAt, err)
	}
	t.Logf("killed after %d of %d deliveries; resumed from %s with %d re-deliveries", killAt, len(expected), c, ck.dups)
}
