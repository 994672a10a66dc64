//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
	"github.com/tidemark-io/tidemark/internal/tmpfs"
)

// TestDiskFullRecovers fills the embedded server's file system from
// outside the engine (another process's writes, which no reserve keeps
// back) right after a burst of commits, so the materializer's copy of
// them fails in the server's store with ENOSPC. The engine must refuse
// commits with engine.ErrWriteFailed and report it on Health, and once
// space returns recover by itself (JetStream restarted in the same
// server) with every completed commit readable, before and after a
// restart of the engine.
func TestDiskFullRecovers(t *testing.T) {
	for _, mode := range []string{commitWAL, commitBatch} {
		t.Run(mode, func(t *testing.T) { testDiskFull(t, mode) })
	}
}

func testDiskFull(t *testing.T, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mnt := tmpfs.Mount(t, 16)
	opts := engine.Options{Dir: filepath.Join(mnt, "data"), Sync: engine.SyncAlways,
		Params: map[string]string{"reserve_mb": "0", "commit": mode}}
	e, err := open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }() // the last engine opened; closing twice only errs
	d := e.(*db)

	c := &enginetest.Committer{E: e, ValueSize: 1000}
	commit := func(id string) error { return c.Commit(ctx, id) }
	for i := range 500 {
		if err := commit(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatalf("commit before the disk filled: %v", err)
		}
	}

	// Another writer takes every byte left.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	_ = f.Close()

	// What still fits a page the store's file already has may go in;
	// the rest must fail.
	for i := 0; ; i++ {
		err := commit(fmt.Sprintf("full-%d", i))
		if err == nil && i < 1000 {
			continue
		}
		if !errors.Is(err, engine.ErrWriteFailed) {
			t.Fatalf("commit %d on a full disk = %v, want engine.ErrWriteFailed", i, err)
		}
		break
	}
	if err := engine.Health(e); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Health on a full disk = %v, want engine.ErrWriteFailed", err)
	}
	if d.broken.Load() == nil {
		// The guard refused before the store wrote: write to the stream
		// past it, as another node on the stream (or, with one writer,
		// the materializer copying the last commits) does, so the
		// server's store fails a write.
		m := &nats.Msg{Subject: d.fenceSubj, Header: nats.Header{}, Data: make([]byte, 64<<10)}
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := d.js.PublishMsg(pctx, m)
		pcancel()
		if err == nil {
			t.Fatal("the server stored 64 KiB on a full disk")
		}
		for d.broken.Load() == nil {
			select {
			case <-ctx.Done():
				t.Fatal("the server's store never failed a write on the full disk")
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for engine.Health(e) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the engine did not recover after space returned: %v", engine.Health(e))
		case <-time.After(50 * time.Millisecond):
		}
	}
	for i := range 100 {
		if err := commit(fmt.Sprintf("after-%d", i)); err != nil {
			t.Fatalf("commit after space returned: %v", err)
		}
	}

	if mode == commitBatch {
		// The index consumer came back with the stream: another node's
		// commit reaches this engine.
		other, err := engine.Open(ctx, Name, engine.Options{Dir: t.TempDir(),
			Params: map[string]string{"url": d.srv.ClientURL(), "commit": commitBatch}})
		if err != nil {
			t.Fatal(err)
		}
		b := &engine.Batch{}
		b.Put([]byte("from-other"), []byte("v"))
		h, err := other.Submit(ctx, b)
		if err == nil {
			_, err = h.Wait(ctx)
		}
		if err != nil {
			t.Fatalf("commit from another node after recovery: %v", err)
		}
		_ = other.Close()
		for {
			if _, err := engine.Get(ctx, e, []byte("from-other")); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("another node's commit after recovery never reached this engine's index")
			case <-time.After(50 * time.Millisecond):
			}
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
