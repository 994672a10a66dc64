//go:build !nojetstream

package jetstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestWALConcurrentScansKeepConnection: readers scanning a log of large
// transactions at once, as subscribers catching up after a restart do,
// read every entry without the server dropping the engine's connection
// as a slow consumer (pages of up to 48 MiB each, several at once, went
// past the server's 64 MiB for one connection).
func TestWALConcurrentScansKeepConnection(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	const commits, perCommit, size, readers = 24, 2, 1 << 20, 8
	for i := range commits {
		b := new(engine.Batch)
		for j := range perCommit {
			e := make([]byte, size)
			binary.BigEndian.PutUint64(e, uint64(i*perCommit+j))
			b.Append(e)
		}
		if _, err := engine.Commit(ctx, d, b); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			err := d.ScanLog(ctx, 0, false, func(e engine.Entry) bool {
				if got := binary.BigEndian.Uint64(e.Value); len(e.Value) != size || got != uint64(n) {
					errs <- fmt.Errorf("reader %d: entry %d holds entry %d (%d bytes)", r, n, got, len(e.Value))
					return false
				}
				n++
				return true
			})
			switch {
			case err != nil:
				errs <- fmt.Errorf("reader %d: scan after %d entries: %w", r, n, err)
			case n != commits*perCommit:
				errs <- fmt.Errorf("reader %d: %d entries, want %d", r, n, commits*perCommit)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.nc.Stats().Reconnects; n != 0 {
		t.Errorf("the connection to the embedded server dropped %d times during the scans", n)
	}
}

// TestWALServerDropsConnection: the embedded server closes the engine's
// connection, now and again with a commit in flight. The engine
// reconnects; every commit either succeeds or fails, and afterwards the
// engine, and a reopen after a crash, hold exactly what the stream holds:
// every key whose commit succeeded, none the engine does not show.
func TestWALServerDropsConnection(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openWALAt(t, dir)
	const n = 200
	ok := make([]bool, n)
	failed := 0
	for i := range n {
		key := fmt.Appendf(nil, "k%03d", i)
		h, err := d.Submit(ctx, new(engine.Batch).Put(key, key).Append(key))
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		if i%25 == 10 {
			cid, err := d.nc.GetClientID()
			if err == nil {
				err = d.srv.DisconnectClientByID(cid)
			}
			if err != nil {
				t.Logf("drop the connection at commit %d: %v", i, err)
			}
		}
		if _, err := h.Wait(ctx); err != nil {
			failed++
			t.Logf("commit %d failed: %v", i, err)
			continue
		}
		ok[i] = true
	}
	if d.nc.Stats().Reconnects == 0 {
		t.Fatalf("the connection never dropped")
	}
	if failed == n {
		t.Fatalf("every commit failed")
	}
	if err := d.Health(); err != nil {
		t.Errorf("health after the server answered again: %v", err)
	}
	live := walKeys(t, d, n)
	for i := range n {
		if ok[i] && !live[i] {
			t.Errorf("k%03d committed but not in the index", i)
		}
	}
	crash(t, d)
	d = openWALAt(t, dir)
	defer d.Close()
	reopened := walKeys(t, d, n)
	for i := range n {
		if live[i] != reopened[i] {
			t.Errorf("k%03d: in the index before the crash %v, after the reopen %v", i, live[i], reopened[i])
		}
	}
	entries := 0
	if err := d.ScanLog(ctx, 0, false, func(engine.Entry) bool { entries++; return true }); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, v := range reopened {
		if v {
			want++
		}
	}
	if entries != want {
		t.Errorf("%d log entries after the reopen, want one per key present (%d)", entries, want)
	}
}

// walKeys returns which of the keys k000..k<n-1> d holds, checking their
// values.
func walKeys(t *testing.T, d *db, n int) []bool {
	t.Helper()
	has := make([]bool, n)
	for i := range n {
		key := fmt.Appendf(nil, "k%03d", i)
		v, err := engine.Get(t.Context(), d, key)
		switch {
		case errors.Is(err, engine.ErrNotFound):
		case err != nil:
			t.Fatalf("get %s: %v", key, err)
		case !bytes.Equal(v, key):
			t.Fatalf("%s holds %q", key, v)
		default:
			has[i] = true
		}
	}
	return has
}
