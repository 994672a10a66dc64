//go:build !nobadger

package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// openDB opens the engine in dir and closes it when the test ends.
func openDB(t *testing.T, dir string, mods ...func(*engine.Options)) *db {
	t.Helper()
	opts := engine.Options{Dir: dir}
	for _, m := range mods {
		m(&opts)
	}
	e, err := open(t.Context(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e.(*db)
}

func submit(t *testing.T, d *db, b *engine.Batch) *engine.Handle {
	t.Helper()
	h, err := d.Submit(t.Context(), b)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return h
}

func mustGet(t *testing.T, d *db, key string) []byte {
	t.Helper()
	v, err := engine.Get(t.Context(), d, []byte(key))
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return v
}

func logValues(t *testing.T, d *db, from engine.LogKey) []string {
	t.Helper()
	var out []string
	if err := d.ScanLog(t.Context(), from, false, func(e engine.Entry) bool {
		out = append(out, string(e.Value))
		return true
	}); err != nil {
		t.Fatalf("scan log: %v", err)
	}
	return out
}

// TestGroupChecksSeeEarlierCommits submits a burst without waiting, so the
// writer packs it into few Badger transactions, and checks each commit's
// outcome is the one a one-at-a-time execution in submission order gives.
func TestGroupChecksSeeEarlierCommits(t *testing.T) {
	d := openDB(t, t.TempDir())
	const rounds = 50
	type want struct {
		h        *engine.Handle
		conflict bool
	}
	var ws []want
	for i := 0; i < rounds; i++ {
		k := []byte(fmt.Sprintf("slot/%02d", i))
		v1, v2 := []byte(fmt.Sprint("a", i)), []byte(fmt.Sprint("b", i))
		ws = append(ws,
			want{h: submit(t, d, new(engine.Batch).ExpectAbsent(k).Put(k, v1).Append(v1))},
			want{h: submit(t, d, new(engine.Batch).ExpectAbsent(k).Put(k, []byte("lost")).Append([]byte("lost"))), conflict: true},
			want{h: submit(t, d, new(engine.Batch).Expect(k, v1).Put(k, v2).Append(v2))},
			want{h: submit(t, d, new(engine.Batch).Expect(k, v1).Delete(k)), conflict: true},
		)
	}
	var prev engine.LogKey
	for i, w := range ws {
		res, err := w.h.Wait(t.Context())
		if w.conflict {
			if !errors.Is(err, engine.ErrConflict) {
				t.Fatalf("commit %d: got %v, want a conflict", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if res.Keys[0] <= prev {
			t.Fatalf("commit %d: key %d not above %d", i, res.Keys[0], prev)
		}
		prev = res.Keys[0]
	}
	if n := d.txns.Load(); n >= uint64(len(ws)) {
		t.Fatalf("%d commits took %d Badger transactions: nothing was grouped", len(ws), n)
	}
	for i := 0; i < rounds; i++ {
		if v := mustGet(t, d, fmt.Sprintf("slot/%02d", i)); string(v) != fmt.Sprint("b", i) {
			t.Fatalf("slot %d = %q, want b%d", i, v, i)
		}
	}
	got := logValues(t, d, 0)
	if len(got) != 2*rounds {
		t.Fatalf("log has %d entries, want %d: %q", len(got), 2*rounds, got)
	}
	for i := 0; i < rounds; i++ {
		if got[2*i] != fmt.Sprint("a", i) || got[2*i+1] != fmt.Sprint("b", i) {
			t.Fatalf("log entries %d..%d = %q, want [a%d b%d]", 2*i, 2*i+1, got[2*i:2*i+2], i, i)
		}
	}
}

// largestBatch is a batch at the engine limits that is hardest for Badger
// to take in one transaction: MaxBatchEntries entries of the longest key
// with a value just under the threshold, so none goes to the value log.
func largestBatch(d *db, tag string) *engine.Batch {
	b := new(engine.Batch)
	val := bytes.Repeat([]byte("v"), int(d.lim.valueThreshold)-1)
	for i := 0; i < engine.MaxBatchEntries-1; i++ {
		key := []byte(fmt.Sprintf("%s/%06d/", tag, i))
		key = append(key, bytes.Repeat([]byte("k"), engine.MaxKeySize-len(key))...)
		b.Put(key, val)
	}
	// The log value carries a 2-byte count ahead of the payload.
	return b.Append(val[:len(val)-2])
}

func TestLargestBatchFitsOneTransaction(t *testing.T) {
	for _, mb := range []string{"32", "64"} {
		t.Run("memtable_mb="+mb, func(t *testing.T) {
			d := openDB(t, t.TempDir(), func(o *engine.Options) { o.Params = map[string]string{"memtable_mb": mb} })
			b := largestBatch(d, "big")
			if err := b.Validate(); err != nil {
				t.Fatalf("test batch breaks the engine limits: %v", err)
			}
			before := d.txns.Load()
			if _, err := engine.Commit(t.Context(), d, b); err != nil {
				t.Fatalf("largest valid batch (value threshold %d): %v", d.lim.valueThreshold, err)
			}
			if n := d.txns.Load() - before; n != 1 {
				t.Fatalf("largest batch took %d Badger transactions, want 1", n)
			}
			if v := mustGet(t, d, string(b.Ops[len(b.Ops)-1].Key)); len(v) != int(d.lim.valueThreshold)-1 {
				t.Fatalf("last key of the batch holds %d bytes", len(v))
			}
		})
	}
}

// TestGroupSplitsAtTransactionLimit submits large commits faster than they
// can commit, with conflicts among them, and checks the writer splits the
// queue over several Badger transactions without losing or reordering a
// commit.
func TestGroupSplitsAtTransactionLimit(t *testing.T) {
	d := openDB(t, t.TempDir(), func(o *engine.Options) { o.Params = map[string]string{"memtable_mb": "32"} })
	testSplit(t, d)
}

// TestGroupRebuildsWhenBadgerRefuses makes the writer's size estimate too
// generous, so Badger refuses a commit part-way through writing it, and
// checks the rebuilt transaction carries exactly the commits before it.
func TestGroupRebuildsWhenBadgerRefuses(t *testing.T) {
	d := openDB(t, t.TempDir(), func(o *engine.Options) { o.Params = map[string]string{"memtable_mb": "32"} })
	d.lim.size, d.lim.count = 1<<40, 1<<40 // before the first Submit, so the writer sees it
	testSplit(t, d)
}

func testSplit(t *testing.T, d *db) {
	t.Helper()
	const commits = 6
	var hs []*engine.Handle
	var conflicts []*engine.Handle
	before := d.txns.Load()
	for i := 0; i < commits; i++ {
		hs = append(hs, submit(t, d, largestBatch(d, fmt.Sprint("c", i))))
		// Checks that depend on the commit just before, in the same queue.
		marker := []byte(fmt.Sprint("c", i, "/000000/"))
		marker = append(marker, bytes.Repeat([]byte("k"), engine.MaxKeySize-len(marker))...)
		conflicts = append(conflicts, submit(t, d, new(engine.Batch).ExpectAbsent(marker).Append([]byte("never"))))
		hs = append(hs, submit(t, d, new(engine.Batch).Expect(marker, bytes.Repeat([]byte("v"), int(d.lim.valueThreshold)-1)).Put([]byte(fmt.Sprint("after", i)), []byte("ok"))))
	}
	var prev engine.LogKey
	for i, h := range hs {
		res, err := h.Wait(t.Context())
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if len(res.Keys) > 0 {
			if res.Keys[0] <= prev {
				t.Fatalf("commit %d: key %d not above %d", i, res.Keys[0], prev)
			}
			prev = res.Keys[0]
		}
	}
	for i, h := range conflicts {
		if _, err := h.Wait(t.Context()); !errors.Is(err, engine.ErrConflict) {
			t.Fatalf("check-only commit %d: got %v, want a conflict", i, err)
		}
	}
	if n := d.txns.Load() - before; n < 2 {
		t.Fatalf("%d commits of the largest size took %d Badger transaction(s): no split", commits, n)
	}
	got := logValues(t, d, 0)
	if len(got) != commits {
		t.Fatalf("log has %d entries, want %d", len(got), commits)
	}
	for i := 0; i < commits; i++ {
		if v := mustGet(t, d, fmt.Sprint("after", i)); string(v) != "ok" {
			t.Fatalf("after%d = %q", i, v)
		}
	}
}

// TestSubmitBlocksOnFullQueue stalls the writer, fills the queue and checks
// Submit waits, gives up with ctx, and that every commit it accepted lands.
func TestSubmitBlocksOnFullQueue(t *testing.T) {
	d := openDB(t, t.TempDir())
	d.groupMu.Lock()
	var hs []*engine.Handle
	// One group is taken off the queue and held at groupMu; fill the rest.
	for i := 0; i < queueLen+1; i++ {
		hs = append(hs, submit(t, d, new(engine.Batch).Put([]byte(fmt.Sprint("q", i)), []byte("v")).Append([]byte(fmt.Sprint(i)))))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	blocked := false
	for i := 0; i < queueLen+1 && !blocked; i++ {
		h, err := d.Submit(ctx, new(engine.Batch).Put([]byte(fmt.Sprint("q", queueLen+1+i)), []byte("v")).Append([]byte("late")))
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			blocked = true
		case err != nil:
			d.groupMu.Unlock()
			t.Fatalf("submit to a full queue: %v", err)
		default:
			hs = append(hs, h)
		}
	}
	d.groupMu.Unlock()
	if !blocked {
		t.Fatalf("submit never blocked with the writer stalled")
	}
	for i, h := range hs {
		if _, err := h.Wait(t.Context()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if got := len(logValues(t, d, 0)); got != len(hs) {
		t.Fatalf("log has %d entries, %d commits were accepted", got, len(hs))
	}
}

// TestCloseCompletesQueuedCommits closes the engine with commits still
// queued: every accepted commit completes and survives the reopen.
func TestCloseCompletesQueuedCommits(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	var hs []*engine.Handle
	for i := 0; i < 500; i++ {
		hs = append(hs, submit(t, d, new(engine.Batch).Put([]byte(fmt.Sprint("k", i)), []byte("v")).Append([]byte(fmt.Sprint(i)))))
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for i, h := range hs {
		select {
		case <-h.Done():
		default:
			t.Fatalf("commit %d still pending after Close returned", i)
		}
		if err := h.Err(); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	d2 := openDB(t, dir)
	if got := logValues(t, d2, 0); len(got) != len(hs) {
		t.Fatalf("after reopen the log has %d entries, want %d", len(got), len(hs))
	}
}
