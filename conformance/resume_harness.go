package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// This file is the fault-injection harness of the resume suite, in one
// place: a movable clock for the engine and the table layer, a rig that
// opens (and reopens) an engine with a table DB on it, named fault points
// on the reader (delay, hold, stop at the n-th hit), stop kinds for replay
// runs, and the checks every resume case shares. The kill points that need
// a real process live in resume_kill.go.

// movableClock is a wall clock a case can move, also backwards, between
// restarts.
type movableClock struct{ offset atomic.Int64 }

func (c *movableClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *movableClock) Shift(d time.Duration) { c.offset.Add(int64(d)) }

// rig is one engine with a table DB on it.
type rig struct {
	t     T
	tg    Target
	dir   string
	clock *movableClock
	sync  engine.SyncMode
	topts table.Options
	e     engine.Engine
	db    *table.DB
}

type rigOption func(*rig)

// tailWindow sets the DB's in-memory tail window, to force readers to
// scan the engine.
func tailWindow(n int) rigOption { return func(r *rig) { r.topts.TailWindow = n } }

func newRig(t T, tg Target, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{t: t, tg: tg, dir: t.TempDir(), clock: &movableClock{}, sync: engine.SyncNone}
	for _, o := range opts {
		o(r)
	}
	r.topts.Clock = r.clock.Now
	r.open()
	t.Cleanup(r.close)
	return r
}

func (r *rig) open() {
	r.t.Helper()
	e, err := r.tg.TryOpen(r.t.Context(), r.dir, func(o *engine.Options) {
		o.Clock = r.clock.Now
		o.Sync = r.sync
	})
	if err != nil {
		r.t.Fatalf("open %s: %v", r.tg.Engine, err)
	}
	db, err := table.Open(r.t.Context(), e, r.topts)
	if err != nil {
		_ = e.Close()
		r.t.Fatalf("open table DB on %s: %v", r.tg.Engine, err)
	}
	r.e, r.db = e, db
}

func (r *rig) close() {
	if r.db != nil {
		_ = r.db.Close()
		r.db = nil
	}
	if r.e != nil {
		if err := r.e.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			r.t.Errorf("close %s: %v", r.tg.Engine, err)
		}
		r.e = nil
	}
}

// restart closes and reopens the engine and DB, with the clock moved by
// shift first.
func (r *rig) restart(shift time.Duration) {
	r.t.Helper()
	r.close()
	r.clock.Shift(shift)
	r.open()
}

func (r *rig) granularity() engine.Granularity { return r.e.Granularity() }

// wrote is one entry a helper wrote.
type wrote struct {
	table, id string
	at        at
	version   table.Version
}

// at identifies a log entry.
type at struct {
	key engine.LogKey
	idx uint32
}

func (a at) String() string { return fmt.Sprintf("%d.%d", a.key, a.idx) }

func evAt(ev table.Event) at { return at{ev.Key, ev.Index} }

var valueSeq atomic.Uint64

// txn commits one transaction putting each id of tbl and returns its
// entries in write order.
func (r *rig) txn(tbl string, ids ...string) []wrote {
	r.t.Helper()
	return r.txnOps(tbl, ids, nil)
}

// txnOps commits puts of ids to tbl; extra adds more writes to the same
// transaction after them (their entries are not returned).
func (r *rig) txnOps(tbl string, ids []string, extra func(*table.Tx)) []wrote {
	r.t.Helper()
	tx := r.db.Begin()
	for _, id := range ids {
		if err := tx.Put(tbl, id, fmt.Appendf(nil, "%s#%d", id, valueSeq.Add(1))); err != nil {
			r.t.Fatalf("put %s/%s: %v", tbl, id, err)
		}
	}
	if extra != nil {
		extra(tx)
	}
	h, err := tx.Submit(r.t.Context())
	if err != nil {
		r.t.Fatalf("submit: %v", err)
	}
	res, err := h.Wait(r.t.Context())
	if err != nil {
		r.t.Fatalf("commit: %v", err)
	}
	out := make([]wrote, len(ids))
	for i, id := range ids {
		out[i] = wrote{table: tbl, id: id, version: tx.Version(), at: at{res.Keys[i], indexIn(res.Keys, i)}}
	}
	return out
}

// submitAll submits every transaction without waiting in between (one
// round trip for all on engines with slow commits), then waits for each.
func (r *rig) submitAll(txs []*table.Tx) []engine.Result {
	r.t.Helper()
	hs := make([]*engine.Handle, len(txs))
	for i, tx := range txs {
		h, err := tx.Submit(r.t.Context())
		if err != nil {
			r.t.Fatalf("submit: %v", err)
		}
		hs[i] = h
	}
	out := make([]engine.Result, len(hs))
	for i, h := range hs {
		res, err := h.Wait(r.t.Context())
		if err != nil {
			r.t.Fatalf("commit: %v", err)
		}
		out[i] = res
	}
	return out
}

// putTxns commits one transaction per group of ids, pipelined, and
// returns the entries in log order.
func (r *rig) putTxns(tbl string, groups [][]string) []wrote {
	r.t.Helper()
	txs := make([]*table.Tx, len(groups))
	for i, ids := range groups {
		txs[i] = r.db.Begin()
		for _, id := range ids {
			if err := txs[i].Put(tbl, id, fmt.Appendf(nil, "%s#%d", id, valueSeq.Add(1))); err != nil {
				r.t.Fatalf("put %s/%s: %v", tbl, id, err)
			}
		}
	}
	var out []wrote
	for i, res := range r.submitAll(txs) {
		for j, id := range groups[i] {
			out = append(out, wrote{table: tbl, id: id, version: txs[i].Version(), at: at{res.Keys[j], indexIn(res.Keys, j)}})
		}
	}
	return out
}

// indexIn is entry j's index among the entries of its key in keys.
func indexIn(keys []engine.LogKey, j int) uint32 {
	var n uint32
	for i := 0; i < j; i++ {
		if keys[i] == keys[j] {
			n++
		}
	}
	return n
}

// head returns the cursor at the end of the log.
func (r *rig) head() table.Cursor {
	r.t.Helper()
	c, err := r.db.Head(r.t.Context())
	if err != nil {
		r.t.Fatalf("head: %v", err)
	}
	return c
}

// faults injects behaviour at a reader's named points: "yield",
// "blocked" and "live" (see readerHooks).
type faults = points[string]

func newFaults() *faults { return newPoints[string]() }

// readerHooks are a table reader's hooks through f's points.
func readerHooks(f *faults) table.Hooks {
	return table.Hooks{
		Yield:   func(uint64) bool { return f.hit("yield") },
		Blocked: func() bool { return f.hit("blocked") },
		Live:    func() bool { return f.hit("live") },
	}
}

// errRefused is what a sink returns to refuse an event (a failed send).
var errRefused = errors.New("sink refused the event")

// run is the outcome of one replay run.
type run struct {
	events []table.Event
	cursor table.Cursor
	err    error
}

// followRun replays with Follow until it has caught up with the log, or
// until it is stopped: refuseAt > 0 refuses the refuseAt-th event (a failed
// send); f may stop it at any point. It returns what was delivered and the
// handled cursor.
func (r *rig) followRun(o table.SubscribeOptions, refuseAt int, f *faults) run {
	r.t.Helper()
	if f == nil {
		f = newFaults()
	}
	hooks := readerHooks(f)
	o.Hooks = table.Hooks{Yield: hooks.Yield, Blocked: hooks.Blocked, Live: func() bool {
		hooks.Live()
		return false // caught up: end the run
	}}
	var out run
	out.cursor, out.err = r.db.Follow(r.t.Context(), o, func(ev table.Event) error {
		if refuseAt > 0 && len(out.events)+1 == refuseAt {
			return errRefused
		}
		out.events = append(out.events, ev)
		return nil
	})
	if out.err != nil && !errors.Is(out.err, errRefused) {
		r.t.Fatalf("follow %s from %s: %v", o.Table, o.Start, out.err)
	}
	return out
}

// replayAll returns every event a subscription with o delivers from
// o.Start until it has caught up.
func (r *rig) replayAll(o table.SubscribeOptions) run {
	r.t.Helper()
	return r.followRun(o, 0, nil)
}

// recvN receives n events from s (failing after a timeout).
func recvN(t T, s *table.Subscription, n int) []table.Event {
	t.Helper()
	var out []table.Event
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("subscription ended after %d of %d events: %v", len(out), n, s.Err())
			}
			out = append(out, ev)
		case <-timeout.C:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

func subscribe(t T, db *table.DB, o table.SubscribeOptions) *table.Subscription {
	t.Helper()
	s, err := db.Subscribe(t.Context(), o)
	if err != nil {
		t.Fatalf("subscribe %s from %s: %v", o.Table, o.Start, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func eventIDs(evs []table.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func joined(ids []string) string { return strings.Join(ids, ",") }

func wantIDs(t T, what string, got []table.Event, want ...string) {
	t.Helper()
	if g := eventIDs(got); !slices.Equal(g, want) {
		t.Fatalf("%s delivered [%s], want [%s]", what, joined(g), joined(want))
	}
}

// dupRule says which re-deliveries a resumed run may contain.
type dupRule int

const (
	// dupPartialKey: coarse cursor after a stop in the reader: only
	// entries of the one key right after the cursor (the partial
	// transaction) may repeat.
	dupPartialKey dupRule = iota
	// dupNone: composite cursor: nothing repeats.
	dupNone
	// dupAny: resume from an acknowledged checkpoint: anything delivered
	// but not acknowledged may repeat (the unacknowledged window).
	dupAny
)

// resumeChecker holds the invariants every stop-and-resume case asserts
// over a chain of runs, given the entries a case expects after its start:
//
//   - a stop's cursor covers no expected entry that was never delivered;
//   - a resumed run delivers nothing its start cursor covers, is in log
//     order with per-id versions never going back, and repeats only what
//     its dupRule allows;
//   - when the chain is complete, every expected entry was delivered.
type resumeChecker struct {
	expected []wrote
	seen     map[at]bool
	dups     int
}

func newResumeChecker(expected []wrote) *resumeChecker {
	return &resumeChecker{expected: expected, seen: map[at]bool{}}
}

func (c *resumeChecker) delivered(evs []table.Event) error {
	if err := checkRunOrder(evs); err != nil {
		return err
	}
	for _, ev := range evs {
		c.seen[evAt(ev)] = true
	}
	return nil
}

func (c *resumeChecker) stopped(cur table.Cursor) error {
	for _, w := range c.expected {
		if !c.seen[w.at] && cur.Covers(w.at.key, w.at.idx) {
			return fmt.Errorf("cursor %s passes %s/%s at %s, which was never delivered", cur, w.table, w.id, w.at)
		}
	}
	return nil
}

func (c *resumeChecker) resumed(from table.Cursor, evs []table.Event, rule dupRule) error {
	var dupKey engine.LogKey
	for _, ev := range evs {
		a := evAt(ev)
		if from.Covers(a.key, a.idx) {
			return fmt.Errorf("resume from %s re-delivered %s at %s, which the cursor covers", from, ev.ID, a)
		}
		if !c.seen[a] {
			continue
		}
		c.dups++
		switch rule {
		case dupNone:
			return fmt.Errorf("composite resume from %s duplicated %s at %s", from, ev.ID, a)
		case dupPartialKey:
			if dupKey == 0 {
				dupKey = a.key
			} else if a.key != dupKey {
				return fmt.Errorf("resume from %s duplicated entries of two keys (%d and %d): only the partial transaction may repeat", from, dupKey, a.key)
			}
		}
	}
	return c.delivered(evs)
}

func (c *resumeChecker) complete() error {
	for _, w := range c.expected {
		if !c.seen[w.at] {
			return fmt.Errorf("%s/%s at %s was never delivered", w.table, w.id, w.at)
		}
	}
	return nil
}

// checkRunOrder checks one run is in log order and never goes back in
// version for one id.
func checkRunOrder(evs []table.Event) error {
	last := map[string]table.Version{}
	for i, ev := range evs {
		if i > 0 && !evAt(evs[i-1]).before(evAt(ev)) {
			return fmt.Errorf("events out of log order: %s then %s", evAt(evs[i-1]), evAt(ev))
		}
		k := ev.Table + "/" + ev.ID
		if v, ok := last[k]; ok && ev.Version < v {
			return fmt.Errorf("%s went back from version %d to %d", k, v, ev.Version)
		}
		last[k] = ev.Version
	}
	return nil
}

// checkResume checks one stop and one complete resume (see
// resumeChecker).
func checkResume(expected []wrote, first []table.Event, c table.Cursor, second []table.Event, composite bool) error {
	ck := newResumeChecker(expected)
	rule := dupPartialKey
	if composite {
		rule = dupNone
	}
	if err := ck.delivered(first); err != nil {
		return err
	}
	if err := ck.stopped(c); err != nil {
		return err
	}
	if err := ck.resumed(c, second, rule); err != nil {
		return err
	}
	return ck.complete()
}

func (a at) before(b at) bool { return a.key < b.key || (a.key == b.key && a.idx < b.idx) }

// ids returns n ids "<prefix>1".."<prefix>n".
func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i+1)
	}
	return out
}
