//go:build !nopebble

package pebble

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
)

// TestDiskFullRecovers fails every write under a running engine the way a
// full disk does (ENOSPC from the file system Pebble writes through), then
// lets writes succeed again: the engine must refuse commits and report it
// while full, recover by itself, and keep every commit it completed,
// before and after a restart, in every sync mode. Under SyncNone and
// SyncInterval commits go to the journal, whose space is reserved, until
// a flush of the memtables meets the full disk: the writers go on until
// then.
func TestDiskFullRecovers(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncAlways, engine.SyncInterval, engine.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) { testDiskFull(t, mode) })
	}
}

func testDiskFull(t *testing.T, mode engine.SyncMode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	opts := engine.Options{Dir: dir, Sync: mode, Params: map[string]string{"memtable_mb": "1"}}
	e, err := open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	d := e.(*db)

	var mu sync.Mutex
	acked := map[string]bool{}
	size := 512
	commit := func(id string) (*engine.Handle, error) {
		b := &engine.Batch{}
		b.Put([]byte("k/"+id), make([]byte, size))
		b.Append([]byte(id))
		return e.Submit(ctx, b)
	}
	wait := func(id string, h *engine.Handle) error {
		_, err := h.Wait(ctx)
		if err == nil {
			mu.Lock()
			acked[id] = true
			mu.Unlock()
		}
		return err
	}
	for i := range 200 {
		id := fmt.Sprintf("before-%d", i)
		h, err := commit(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(id, h); err != nil {
			t.Fatalf("commit %s before the disk filled: %v", id, err)
		}
	}

	full := func(op, name string) error { return fmt.Errorf("%s %s: %w", op, name, syscall.ENOSPC) }
	d.fs.fault.Store(&full)
	// Commits in flight from several writers when the disk fills; with
	// the journal, until one fails (64 MiB of memtables' worth at most).
	commits, failed := 100, atomic.Bool{}
	if mode != engine.SyncAlways {
		size, commits = 4096, 4096
	}
	var wg sync.WaitGroup
	failures := make(chan error, 4*commits)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < commits && (mode == engine.SyncAlways || !failed.Load()); i++ {
				id := fmt.Sprintf("full-%d-%d", w, i)
				h, err := commit(id)
				if err != nil {
					failed.Store(true)
					failures <- fmt.Errorf("submit %s: %w", id, err)
					continue
				}
				if err := wait(id, h); err != nil {
					failed.Store(true)
					failures <- err
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	n := 0
	for err := range failures {
		n++
		if !errors.Is(err, engine.ErrWriteFailed) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("commit on a full disk failed with %v, want an error wrapping engine.ErrWriteFailed and ENOSPC", err)
		}
	}
	if n == 0 {
		t.Fatal("every commit succeeded on a full disk")
	}
	if err := engine.Health(e); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Health on a full disk = %v, want engine.ErrWriteFailed", err)
	}
	if err := d.probe(); err == nil {
		t.Fatal("the space probe succeeded on a full disk")
	}

	// Space returns: the engine recovers without a restart.
	d.fs.fault.Store(nil)
	for engine.Health(e) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the engine did not recover after space returned: %v", engine.Health(e))
		case <-time.After(20 * time.Millisecond):
		}
	}
	size = 512
	for i := range 200 {
		id := fmt.Sprintf("after-%d", i)
		h, err := commit(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(id, h); err != nil {
			t.Fatalf("commit %s after space returned: %v", id, err)
		}
	}
	check := func(e engine.Engine, when string) {
		t.Helper()
		mu.Lock()
		ids := slices.Collect(maps.Keys(acked))
		mu.Unlock()
		enginetest.CheckCommitted(t, ctx, e, ids, when)
	}
	check(e, "after recovery")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, err = engine.Open(ctx, Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	check(e, "after a restart")
}
