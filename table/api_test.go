package table_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

func TestPreconditions(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	tx := db.Begin()
	_ = tx.ExpectAbsent("t", "x")
	_ = tx.Put("t", "x", []byte("1"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("create with ExpectAbsent: %v", err)
	}
	v1 := tx.Version()
	tx = db.Begin()
	_ = tx.ExpectAbsent("t", "x")
	_ = tx.Put("t", "x", []byte("again"))
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("second create: %v, want ErrConflict", err)
	}
	tx = db.Begin()
	_ = tx.ExpectVersion("t", "x", v1+1)
	_ = tx.Put("t", "x", []byte("wrong"))
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("update at a wrong version: %v, want ErrConflict", err)
	}
	tx = db.Begin()
	_ = tx.ExpectVersion("t", "x", v1)
	_ = tx.Delete("t", "x")
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("delete at the right version: %v", err)
	}
	if r, err := db.Get(ctx, "t", "x"); !errors.Is(err, table.ErrNotFound) || !r.Deleted {
		t.Fatalf("after delete: %+v, %v", r, err)
	}
	// A deleted record counts as absent.
	tx = db.Begin()
	_ = tx.ExpectAbsent("t", "x")
	_ = tx.Put("t", "x", []byte("reborn"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("recreate after delete: %v", err)
	}
	// Nothing of a failed transaction is applied, and its log entry is absent.
	h, _ := db.Head(ctx)
	tx = db.Begin()
	_ = tx.Put("t", "y", []byte("never"))
	_ = tx.ExpectVersion("t", "x", 1)
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("conflicting tx: %v", err)
	}
	if _, err := db.Get(ctx, "t", "y"); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("write of a failed tx visible: %v", err)
	}
	if h2, _ := db.Head(ctx); h2 != h {
		t.Fatalf("failed tx moved the log head from %s to %s", h, h2)
	}
}

func TestTxMisuse(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	tx := db.Begin()
	if err := tx.Put("t", strings.Repeat("x", table.MaxIDLen("t")+1), nil); !errors.Is(err, table.ErrInvalidName) || !errors.Is(err, engine.ErrKeyTooLarge) {
		t.Fatalf("oversized id: %v", err)
	}
	if err := tx.Commit(ctx); !errors.Is(err, table.ErrInvalidName) {
		t.Fatalf("commit of a tx with a rejected write: %v", err)
	}
	if err := tx.Put("t", "x", nil); !errors.Is(err, table.ErrTxDone) {
		t.Fatalf("put after commit: %v", err)
	}
	if _, err := tx.Submit(ctx); !errors.Is(err, table.ErrTxDone) {
		t.Fatalf("second submit: %v", err)
	}
	if err := db.Begin().Commit(ctx); !errors.Is(err, engine.ErrEmptyBatch) {
		t.Fatalf("empty tx: %v", err)
	}
	if _, err := db.Subscribe(ctx, table.SubscribeOptions{ID: "x"}); err == nil {
		t.Fatalf("id scope without a table accepted")
	}
	if _, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", ID: "x", Prefix: "y"}); err == nil {
		t.Fatalf("id and prefix scope together accepted")
	}
}

// TestBeginSized: a Tx sized for fewer writes and checks than it gets
// takes them all, counts them in Size, and commits them all.
func TestBeginSized(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	tx := db.BeginSized(2, 1)
	for i := range 10 {
		id := fmt.Sprintf("k%d", i)
		if err := tx.ExpectAbsent("sized", id); err != nil {
			t.Fatal(err)
		}
		if err := tx.Put("sized", id, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	if w, c := tx.Size(); w != 10 || c != 10 {
		t.Fatalf("Size() = %d writes, %d checks; want 10, 10", w, c)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		id := fmt.Sprintf("k%d", i)
		if r, err := db.Get(ctx, "sized", id); err != nil || string(r.Value) != id {
			t.Fatalf("%s: %q, %v", id, r.Value, err)
		}
	}
}

func TestMessagesAndLatestState(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	start, _ := db.Head(ctx)
	put(t, db, "t", "x", "1")
	tx := db.Begin()
	_ = tx.Message("t", "x", []byte("m1"))
	_ = tx.Message("t", "x", []byte("m2"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, db, "t", "x", "2")
	if r, _ := db.Get(ctx, "t", "x"); string(r.Value) != "2" {
		t.Fatalf("messages changed the record: %q", r.Value)
	}
	s, _ := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: start})
	defer s.Close()
	evs := recv(t, s, 3)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Op.String()+":"+string(ev.Value))
	}
	// Latest-state mode drops the superseded put, never a message.
	if fmt.Sprint(got) != "[message:m1 message:m2 put:2]" {
		t.Fatalf("latest-state stream = %v", got)
	}
}

func TestCompositeCheckpoint(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	start, _ := db.Head(ctx)
	put(t, db, "t", "a", "1", "b", "2", "c", "3")
	s, _ := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: start, IncludeSuperseded: true, Composite: true})
	evs := recv(t, s, 3)
	_ = s.Ack(evs[0])
	cp := s.Checkpoint()
	_ = s.Close()
	if cp != evs[0].Cursor() {
		t.Fatalf("composite checkpoint after acking a = %s, want %s", cp, evs[0].Cursor())
	}
	s2, _ := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: cp, IncludeSuperseded: true})
	defer s2.Close()
	if got := ids(recv(t, s2, 2)); got != "b,c" {
		t.Fatalf("resume from the composite checkpoint = %s", got)
	}
	if err := s2.Ack(evs[1]); err == nil {
		t.Fatalf("ack of another subscription's event accepted")
	}
}

func TestFollowRefusalAndEnds(t *testing.T) {
	db, e := openDB(t)
	ctx := context.Background()
	start, _ := db.Head(ctx)
	put(t, db, "t", "a", "1")
	put(t, db, "t", "b", "2")
	stop := errors.New("stop")
	var seen []string
	c, err := db.Follow(ctx, table.SubscribeOptions{Table: "t", Start: start}, func(ev table.Event) error {
		if ev.ID == "b" {
			return stop
		}
		seen = append(seen, ev.ID)
		return nil
	})
	if !errors.Is(err, stop) || fmt.Sprint(seen) != "[a]" {
		t.Fatalf("follow refusal: %v, %v", err, seen)
	}
	a, _ := db.Head(ctx)
	if c == a || c == start {
		t.Fatalf("follow cursor after the refusal = %s (start %s, head %s)", c, start, a)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = db.Follow(cctx, table.SubscribeOptions{Table: "t", Start: c}, func(table.Event) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("follow until the context ends: %v", err)
	}
	// A corrupt entry in the log fails readers instead of being skipped.
	if _, err := engine.Commit(ctx, e, new(engine.Batch).Append([]byte("garbage"))); err != nil {
		t.Fatal(err)
	}
	_, err = db.Follow(ctx, table.SubscribeOptions{Table: "t", Start: c}, func(table.Event) error { return nil })
	if !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("follow across a corrupt entry: %v, want ErrCorrupt", err)
	}
}

func TestSubscriptionEndsWithDB(t *testing.T) {
	db, e := openDB(t)
	ctx := context.Background()
	s, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	s2, _ := db.Subscribe(cctx, table.SubscribeOptions{Table: "t"})
	cancel()
	<-s2.Done()
	if !errors.Is(s2.Err(), context.Canceled) {
		t.Fatalf("subscription whose context ended: Err = %v", s2.Err())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if !errors.Is(s.Err(), table.ErrClosed) || !errors.Is(s.Err(), engine.ErrClosed) {
		t.Fatalf("subscription after DB.Close: Err = %v", s.Err())
	}
	if _, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t"}); !errors.Is(err, table.ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if err := db.Begin().Put("t", "x", nil); err != nil {
		t.Fatal(err)
	}
	tx := db.Begin()
	_ = tx.Put("t", "x", nil)
	if err := tx.Commit(ctx); !errors.Is(err, table.ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	// The engine stays usable: the DB does not own it.
	if _, err := engine.Commit(ctx, e, new(engine.Batch).Put([]byte("k"), nil)); err != nil {
		t.Fatalf("engine after DB.Close: %v", err)
	}
}

// TestFanOutWithSmallWindow runs many live subscribers over a tail window
// far smaller than the traffic, so slow ones fall out of the window and
// catch up from the engine; every one must see every entry once, in order.
func TestFanOutWithSmallWindow(t *testing.T) {
	for name, opts := range map[string]table.Options{"entries": {TailWindow: 8}, "bytes": {TailBytes: 50}} {
		t.Run(name, func(t *testing.T) { fanOut(t, opts) })
	}
}

func fanOut(t *testing.T, opts table.Options) {
	e, err := engine.Open(context.Background(), engineName(), engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(context.Background(), e, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	start, _ := db.Head(ctx)
	const subs, writes = 50, 400
	var wg sync.WaitGroup
	errs := make(chan error, subs)
	for i := 0; i < subs; i++ {
		s, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: start, IncludeSuperseded: true, Buffer: 1 + i%5})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			for n := 0; n < writes; n++ {
				select {
				case ev := <-s.Events():
					if ev.ID != fmt.Sprintf("k%04d", n) {
						errs <- fmt.Errorf("subscriber %d: event %d is %s", i, n, ev.ID)
						return
					}
					if i%7 == 0 && n%50 == 0 {
						time.Sleep(5 * time.Millisecond) // a slow consumer
					}
				case <-time.After(20 * time.Second):
					errs <- fmt.Errorf("subscriber %d: stalled after %d events", i, n)
					return
				}
			}
		}()
	}
	var hs []*engine.Handle
	for n := 0; n < writes; n++ {
		tx := db.Begin()
		_ = tx.Put("t", fmt.Sprintf("k%04d", n), []byte("0123456789"))
		h, err := tx.Submit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if _, err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestRetentionHelpers(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	put(t, db, "t", "a", "1")
	c, _ := db.Head(ctx)
	put(t, db, "t", "b", "2")
	if err := db.TruncateBelow(ctx, c); err != nil {
		t.Fatal(err)
	}
	st, err := db.LogStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Floor != c.Key+1 || st.First <= c.Key {
		t.Fatalf("after TruncateBelow(%s): %+v", c, st)
	}
	s, _ := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: c, IncludeSuperseded: true})
	defer s.Close()
	if got := ids(recv(t, s, 1)); got != "b" {
		t.Fatalf("resume at the truncation floor = %s", got)
	}
}

// TestVersionsMonotonicAcrossCrashAndRollback writes state without log
// entries after the last hint, "crashes" (the engine closes under the DB,
// so no closing hint is written), restarts with the clock 10 s back and
// writes again: the new version must be above every version issued.
func TestVersionsMonotonicAcrossCrashAndRollback(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var offset time.Duration
	clock := func() time.Time { return time.Now().Add(offset) }
	open := func() (*table.DB, engine.Engine) {
		e, err := engine.Open(ctx, engineName(), engine.Options{Dir: dir, Sync: engine.SyncNone, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		db, err := table.Open(ctx, e, table.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return db, e
	}
	db, e := open()
	var last table.Version
	for i := 0; i < 50; i++ {
		tx := db.Begin()
		_ = tx.PutState("s", "x", []byte{byte(i)})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		last = tx.Version()
	}
	_ = e.Close() // a crash: the DB never writes its closing hint
	_ = db.Close()
	offset = -10 * time.Second
	db, e = open()
	defer e.Close()
	defer db.Close()
	tx := db.Begin()
	_ = tx.PutState("s", "y", nil)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if tx.Version() <= last {
		t.Fatalf("after a crash and a 10s clock rollback, version %d is not above %d", tx.Version(), last)
	}
}
