//go:build !nobadger

package badger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
	"github.com/tidemark-io/tidemark/internal/tmpfs"
)

// TestDiskFullRecovers commits from several writers until a small file
// system fills: the engine must refuse commits with engine.ErrWriteFailed
// wrapping ENOSPC before Badger's memory-mapped writes meet the full disk
// (which would end the process), report it on Health, recover by itself
// once space returns, and keep every commit it completed, before and
// after a restart. Badger never sees a failed write, so this holds in
// every sync mode.
func TestDiskFullRecovers(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncAlways, engine.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) { testDiskFull(t, mode) })
	}
}

func testDiskFull(t *testing.T, mode engine.SyncMode) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mnt := tmpfs.Mount(t, 16)
	filler := filepath.Join(mnt, "filler")
	tmpfs.Fill(t, filler, 8<<20)
	opts := engine.Options{Dir: filepath.Join(mnt, "data"), Sync: mode,
		Params: map[string]string{"memtable_mb": "32", "reserve_mb": "1"}}
	e, err := engine.Open(ctx, Name, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }() // the last engine opened; closing twice only errs

	c := &enginetest.Committer{E: e, ValueSize: 2000}
	commit := func(id string) error { return c.Commit(ctx, id) }

	// Four writers until each sees the disk full.
	var wg sync.WaitGroup
	failures := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				if err := commit(fmt.Sprintf("full-%d-%d", w, i)); err != nil {
					failures <- err
					return
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
			t.Fatalf("commit on a full disk failed with %v, want engine.ErrWriteFailed and ENOSPC", err)
		}
	}
	if n == 0 {
		t.Fatal("80,000 commits fit; the disk never filled")
	}
	if err := engine.Health(e); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Health on a full disk = %v, want engine.ErrWriteFailed", err)
	}
	if err := e.Truncate(ctx, 1); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Truncate on a full disk = %v, want engine.ErrWriteFailed", err)
	}
	t.Logf("%d commits completed before the disk filled", len(c.Completed()))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for engine.Health(e) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the engine did not recover after space returned: %v", engine.Health(e))
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range 100 {
		if err := commit(fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatalf("commit after space returned: %v", err)
		}
	}

	check := func(e engine.Engine, when string) {
		t.Helper()
		enginetest.CheckCommitted(t, ctx, e, c.Completed(), when)
	}
	check(e, "after recovery")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if e, err = engine.Open(ctx, Name, opts); err != nil {
		t.Fatal(err)
	}
	check(e, "after a restart")
}
