//go:build linux && !nopebble

package pebble

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
)

// openAlwaysJournal opens a SyncAlways store that syncs through the
// journal, with a defer window of window.
func openAlwaysJournal(t *testing.T, ctx context.Context, window time.Duration) (*db, engine.Options) {
	t.Helper()
	opts := engine.Options{Dir: t.TempDir(), Sync: engine.SyncAlways, DeferWindow: window, Params: map[string]string{"journal_kb": "128"}}
	e, err := open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	d := e.(*db)
	if d.jq == nil || !d.popts.DisableWAL {
		t.Fatal("SyncAlways with journal_kb set does not sync through the journal")
	}
	return d, opts
}

func isDone(h *engine.Handle) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// TestJournalSyncCompletesEveryCommit has committers that hurry their
// commits (Handle.Wait) and committers that only wait for them (Done),
// some of them deferred, share the journal's syncs: every commit must
// complete, each committer's in the order it submitted them, and all be
// in the store after a crash copy is opened. A commit queued while a
// waiter synced, with no waiter of its own to hurry it, completes only
// if the syncer learns of it.
func TestJournalSyncCompletesEveryCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, opts := openAlwaysJournal(t, ctx, 0)
	var mu sync.Mutex
	var completed []string
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var prev *engine.Handle
			for i := range 400 {
				id := fmt.Sprintf("w%d-%d", w, i)
				b := (&engine.Batch{Defer: r.IntN(3) == 0}).Put([]byte("k/"+id), []byte(id)).Append([]byte(id))
				h, err := d.Submit(ctx, b)
				if err != nil {
					t.Error(err)
					return
				}
				// Odd committers keep two commits in flight and never
				// hurry; even ones wait for each with Wait, which does.
				if w%2 == 0 {
					if _, err := h.Wait(ctx); err != nil {
						t.Error(err)
						return
					}
				} else if prev != nil {
					select {
					case <-prev.Done():
					case <-ctx.Done():
						t.Errorf("committer %d: a commit queued behind other waiters' syncs never completed", w)
						return
					}
					if !isDone(prev) || prev.Err() != nil {
						t.Errorf("committer %d: commit %d: %v", w, i-1, prev.Err())
						return
					}
				}
				// h first: once it is done, prev must be.
				if prev != nil && isDone(h) && !isDone(prev) {
					t.Errorf("committer %d: commit %d completed before the one submitted before it", w, i)
					return
				}
				mu.Lock()
				completed = append(completed, id)
				mu.Unlock()
				prev = h
			}
			if prev != nil {
				<-prev.Done()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	crashed := copyDir(t, opts.Dir)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := open(ctx, engine.Options{Dir: crashed, Sync: engine.SyncAlways, Params: opts.Params})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	enginetest.CheckCommitted(t, ctx, e, completed, "after a crash")
}

// TestJournalHurryLeavesDeferredCommits checks that hurrying a deferred
// commit does not sync it by itself: it waits for a commit someone needs
// synced, and then completes with it.
func TestJournalHurryLeavesDeferredCommits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const window = 20 * time.Second
	d, _ := openAlwaysJournal(t, ctx, window)
	defer d.Close()
	commit := func(deferred bool, id string) *engine.Handle {
		t.Helper()
		h, err := d.Submit(ctx, (&engine.Batch{Defer: deferred}).Put([]byte(id), []byte(id)).Append([]byte(id)))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// A commit nobody defers opens the window in which deferring pays.
	if _, err := commit(false, "first").Wait(ctx); err != nil {
		t.Fatal(err)
	}
	deferred := commit(true, "deferred")
	deferred.Hurry()
	time.Sleep(50 * time.Millisecond)
	if isDone(deferred) {
		t.Fatal("hurrying a deferred commit synced it alone, inside its defer window")
	}
	urgent := commit(false, "urgent")
	if _, err := urgent.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithTimeout(ctx, window/2)
	defer stop()
	if _, err := deferred.Wait(waitCtx); err != nil {
		t.Fatalf("the deferred commit did not complete with the sync of the commit after it: %v", err)
	}
}
