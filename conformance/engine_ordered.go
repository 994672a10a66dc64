package conformance

import (
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

// caseOrdered checks engine.Batch.Ordered in every durability mode: an
// engine calls it at most once per commit, before its Submit returns (the
// table layer lets the next commit in from there), and never for a
// commit whose checks failed; the commit is then readable, and its
// completion is still reported through the handle.
func caseOrdered(t T, tg Target) {
	for _, mode := range []engine.SyncMode{engine.SyncAlways, engine.SyncInterval, engine.SyncNone} {
		e := tg.Open(t, t.TempDir(), func(o *engine.Options) { o.Sync = mode })
		ctx := t.Context()
		for i := range 20 {
			key := []byte(fmt.Sprintf("ord/%02d", i))
			calls, returned, early := 0, false, false
			b := new(engine.Batch).Put(key, []byte("v")).Append([]byte(fmt.Sprint(i)))
			b.Ordered = func() {
				calls++
				early = !returned
			}
			h, err := e.Submit(ctx, b)
			returned = true
			if err != nil {
				t.Fatalf("%s: submit %d: %v", mode, i, err)
			}
			if calls > 1 || (calls == 1 && !early) {
				t.Fatalf("%s: commit %d: Ordered called %d times, before Submit returned: %v", mode, i, calls, early)
			}
			if _, err := h.Wait(ctx); err != nil {
				t.Fatalf("%s: commit %d: %v", mode, i, err)
			}
			if v, err := engine.Get(ctx, e, key); err != nil || string(v) != "v" {
				t.Fatalf("%s: commit %d: read back %q, %v", mode, i, v, err)
			}
		}
		// A failed check: not ordered, nothing applied.
		called := false
		b := new(engine.Batch).ExpectAbsent([]byte("ord/00")).Put([]byte("ord/x"), []byte("v"))
		b.Ordered = func() { called = true }
		h, err := e.Submit(ctx, b)
		if err == nil {
			_, err = h.Wait(ctx)
		}
		if !errors.Is(err, engine.ErrConflict) {
			t.Fatalf("%s: a failed check: %v, want ErrConflict", mode, err)
		}
		if called {
			t.Fatalf("%s: Ordered called for a commit whose check failed", mode)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("%s: close: %v", mode, err)
		}
	}
}
