//go:build cgo && !nolmdb

package lmdb

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// A failed commit turns Health failing, commits keep being tried (LMDB
// needs no reopen), and the writer's own probe clears the failure once
// the directory takes writes, without a client commit.
func TestHealthAfterWriteFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := open(ctx, engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d := e.(*db)
	if err := engine.Health(e); err != nil {
		t.Fatalf("Health of a fresh engine: %v", err)
	}
	werr := d.writeFailed("commit", fmt.Errorf("mdb_txn_commit: %w", syscall.ENOSPC))
	if !errors.Is(werr, engine.ErrWriteFailed) || !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("write failure %v does not wrap engine.ErrWriteFailed and ENOSPC", werr)
	}
	if err := engine.Health(e); !errors.Is(err, engine.ErrWriteFailed) {
		t.Fatalf("Health after a failed commit = %v, want engine.ErrWriteFailed", err)
	}
	b := &engine.Batch{}
	b.Put([]byte("k"), []byte("v"))
	if _, err := engine.Commit(ctx, e, b); err != nil {
		t.Fatalf("commit after a failure: %v", err)
	}
	for engine.Health(e) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("Health still failing with space in the directory: %v", engine.Health(e))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := engine.Health(e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Health after Close = %v, want engine.ErrClosed", err)
	}
}
