package conformance

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// caseDeferred checks commits marked Defer (engine.Batch.Defer): they
// complete in submission order among the others, with the checks, log
// keys and visibility of any commit; a run of them with nothing after
// still completes (the engine syncs them alone once its window passed);
// and what they wrote is there after a reopen.
func caseDeferred(t T, tg Target) {
	dir := t.TempDir()
	e := tg.Open(t, dir)
	ctx := t.Context()
	const n = 300
	hs := make([]*engine.Handle, n)
	for i := range hs {
		b := new(engine.Batch).Put([]byte(fmt.Sprintf("d/%04d", i)), []byte(fmt.Sprint(i))).Append([]byte(fmt.Sprint(i)))
		// Runs of deferred commits of every length up to 7, then one
		// that is not, and a deferred tail of 20 with nothing after.
		b.Defer = i >= n-20 || i%8 != 7
		h, err := e.Submit(ctx, b)
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		hs[i] = h
	}
	checkCompletionOrder(t, hs)

	// One alone, long after the others: completes, and its entry is in
	// the log once it has.
	start := time.Now()
	lone := new(engine.Batch).Put([]byte("d/lone"), []byte("1")).Append([]byte("lone"))
	lone.Defer = true
	r := commit(t, e, lone)
	if es := scanAll(t, e, r.Keys[0], false); len(es) == 0 || string(es[0].Value) != "lone" {
		t.Fatalf("the lone deferred commit completed but its log entry is not scanned from its key: %d entries", len(es))
	}
	t.Logf("a lone deferred commit completed in %v", time.Since(start))

	// Checks decide as for any commit, against deferred writes too.
	bad := new(engine.Batch).Expect([]byte("d/lone"), []byte("2")).Put([]byte("d/bad"), []byte("x"))
	bad.Defer = true
	_, err := engine.Commit(ctx, e, bad)
	wantErr(t, "deferred commit with a failing check", err, engine.ErrConflict)
	good := new(engine.Batch).Expect([]byte("d/lone"), []byte("1")).Put([]byte("d/good"), []byte("y"))
	good.Defer = true
	commit(t, e, good)
	wantAbsent(t, e, "d/bad")

	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e2 := tg.Open(t, dir)
	for i := 0; i < n; i++ {
		wantValue(t, e2, fmt.Sprintf("d/%04d", i), fmt.Sprint(i))
	}
	wantValue(t, e2, "d/good", "y")
	if es := scanAll(t, e2, 0, false); len(es) != n+1 {
		t.Fatalf("log after reopen has %d entries, want %d", len(es), n+1)
	}
	if _, err := e2.Submit(ctx, &engine.Batch{Defer: true}); !errors.Is(err, engine.ErrEmptyBatch) {
		t.Fatalf("empty deferred batch: %v, want ErrEmptyBatch", err)
	}
}
