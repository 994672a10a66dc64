package table_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/table"
)

// engineName is the engine the unit tests run on; every engine runs the
// layer's cross-engine cases in the conformance suite.
func engineName() string {
	if n := os.Getenv("TIDEMARK_TABLE_ENGINE"); n != "" {
		return n
	}
	return "pebble"
}

func openDB(t testing.TB, mods ...func(*engine.Options)) (*table.DB, engine.Engine) {
	t.Helper()
	opts := engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone}
	for _, m := range mods {
		m(&opts)
	}
	e, err := engine.Open(context.Background(), engineName(), opts)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	db, err := table.Open(context.Background(), e, table.Options{Clock: opts.Clock})
	if err != nil {
		t.Fatalf("open table db: %v", err)
	}
	t.Cleanup(func() {
		_ = db.Close()
		_ = e.Close()
	})
	return db, e
}

func put(t testing.TB, db *table.DB, tbl string, kv ...string) table.Version {
	t.Helper()
	tx := db.Begin()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := tx.Put(tbl, kv[i], []byte(kv[i+1])); err != nil {
			t.Fatalf("put: %v", err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return tx.Version()
}

func recv(t testing.TB, s *table.Subscription, n int) []table.Event {
	t.Helper()
	var out []table.Event
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				t.Fatalf("subscription ended after %d of %d events: %v", len(out), n, s.Err())
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events", len(out), n)
		}
	}
	return out
}

func ids(evs []table.Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, e.ID)
	}
	return strings.Join(b, ",")
}

func TestGetRangeDelete(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	v1 := put(t, db, "t", "a", "1", "b", "2", "c", "3")
	put(t, db, "u", "a", "x")
	r, err := db.Get(ctx, "t", "b")
	if err != nil || string(r.Value) != "2" || r.Version != v1 {
		t.Fatalf("get b = %+v, %v", r, err)
	}
	tx := db.Begin()
	_ = tx.Delete("t", "b")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = db.Get(ctx, "t", "b")
	if !errors.Is(err, table.ErrNotFound) || !errors.Is(err, engine.ErrNotFound) || !r.Deleted || r.Version <= v1 {
		t.Fatalf("get deleted b = %+v, %v", r, err)
	}
	// A record never written: both sentinels, and a message naming it.
	r, err = db.Get(ctx, "t", "never")
	if !errors.Is(err, table.ErrNotFound) || !errors.Is(err, engine.ErrNotFound) || r.Deleted || r.ID != "never" ||
		!strings.Contains(err.Error(), `t/"never"`) || !strings.Contains(err.Error(), engine.ErrNotFound.Error()) {
		t.Fatalf("get never written = %+v, %v", r, err)
	}
	var got []string
	if err := db.Range(ctx, "t", "", func(r table.Record) bool { got = append(got, r.ID+"="+string(r.Value)); return true }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a=1 c=3]" {
		t.Fatalf("range = %v", got)
	}
}

// TestValuesReusableAfterSubmit checks the Tx's promise that Submit
// copies what it is given: buffers reused once Submit returned (the broker
// encodes a group's messages into one buffer) change nothing committed,
// neither records nor log entries, and an ExpectState compares the bytes
// as they were at Submit.
func TestValuesReusableAfterSubmit(t *testing.T) {
	ctx := t.Context()
	db, _ := openDB(t)
	buf := []byte("first,staged,message")
	tx := db.Begin()
	_ = tx.Put("t", "a", buf[:5])
	_ = tx.PutStateUnchecked("s", "slot", buf[6:12])
	_ = tx.Message("m", "topic", buf[13:])
	h, err := tx.Submit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, strings.Repeat("X", len(buf)))
	if _, err := h.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := db.Get(ctx, "t", "a"); err != nil || string(r.Value) != "first" {
		t.Fatalf("record = %q, %v", r.Value, err)
	}
	if r, err := db.Get(ctx, "s", "slot"); err != nil || string(r.Value) != "staged" {
		t.Fatalf("state record = %q, %v", r.Value, err)
	}
	s, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "m"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ev := recv(t, s, 1)[0]; string(ev.Value) != "message" {
		t.Fatalf("log entry = %q", ev.Value)
	}

	want := []byte("staged")
	release := db.Begin()
	_ = release.ExpectState("s", "slot", tx.Version(), want)
	_ = release.DeleteStateUnchecked("s", "slot")
	if h, err = release.Submit(ctx); err != nil {
		t.Fatal(err)
	}
	copy(want, "XXXXXX")
	if _, err := h.Wait(ctx); err != nil {
		t.Fatalf("ExpectState of the bytes given, changed after Submit: %v", err)
	}
}

// TestCheckpointCoversWhatWasAcked acknowledges each live event as soon as
// it arrives and reads the checkpoint at once: it must already stand past
// the event (the frontier moves as the event is handed over, not after).
func TestCheckpointCoversWhatWasAcked(t *testing.T) {
	db, _ := openDB(t)
	s, err := db.Subscribe(t.Context(), table.SubscribeOptions{Table: "t", IncludeSuperseded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 300 {
		put(t, db, "t", fmt.Sprint("k", i), "v")
		ev := recv(t, s, 1)[0]
		if err := s.Ack(ev); err != nil {
			t.Fatal(err)
		}
		if c := s.Checkpoint(); c != ev.Cursor() {
			t.Fatalf("event %d: checkpoint %v right after its ack, want %v", i, c, ev.Cursor())
		}
	}
}

func TestSubscribeReplayLiveAck(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	put(t, db, "t", "a", "1", "b", "2")
	put(t, db, "u", "z", "1")
	put(t, db, "t", "c", "3")
	s, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", IncludeSuperseded: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs := recv(t, s, 3)
	if ids(evs) != "a,b,c" {
		t.Fatalf("replay = %s", ids(evs))
	}
	put(t, db, "t", "d", "4")
	evs = append(evs, recv(t, s, 1)...)
	if evs[3].ID != "d" {
		t.Fatalf("live = %s", evs[3].ID)
	}
	if c := s.Checkpoint(); c != (table.Cursor{}) {
		t.Fatalf("checkpoint before acks = %v", c)
	}
	_ = s.Ack(evs[0])
	// Where every record has a log key of its own (LMDB, JetStream), a
	// and b are two transactions' worth of keys, and a alone is whole.
	want := table.Cursor{}
	if evs[0].Key != evs[1].Key {
		want = table.Cursor{Key: evs[0].Key}
	}
	if c := s.Checkpoint(); c != want {
		t.Fatalf("checkpoint after acking half a transaction = %v, want %v", c, want)
	}
	_ = s.Ack(evs[1])
	if c := s.Checkpoint(); c.Key != evs[1].Key {
		t.Fatalf("checkpoint after acking the transaction = %v, want %d", c, evs[1].Key)
	}
	_ = s.Ack(evs[3])
	if c := s.Checkpoint(); c.Key != evs[1].Key {
		t.Fatalf("checkpoint with c unacked = %v", c)
	}
	_ = s.Ack(evs[2])
	if c := s.Checkpoint(); c.Key != evs[3].Key {
		t.Fatalf("checkpoint after all acks = %v, want %d", c, evs[3].Key)
	}
}
