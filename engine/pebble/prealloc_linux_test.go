//go:build linux && !nopebble

package pebble_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestWALPreallocatedWithinFile checks that a write-ahead log's reserved
// space is part of the file (so a synced commit's write does not move the
// end of the file), and that the store reopens whole over such logs: the
// newest one ends in zeros, and the older ones end in their trailers with
// zeros after them. Small memtables make the commits fill several logs in
// each of the rounds, and every round reopens the store over them.
func TestWALPreallocatedWithinFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := engine.Options{Dir: dir, Sync: engine.SyncAlways, Params: map[string]string{"memtable_mb": "1"}}
	// Pebble reserves 110% of the memtable size for each log.
	const reserved = (1 << 20) + (1<<20)/10
	value := bytes.Repeat([]byte("v"), 2048)
	const rounds, perRound = 3, 1500
	for round := range rounds {
		e, err := engine.Open(ctx, "pebble", opts)
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		// Everything committed in earlier rounds is there.
		entries := 0
		if err := e.ScanLog(ctx, 0, false, func(engine.Entry) bool { entries++; return true }); err != nil {
			t.Fatal(err)
		}
		if want := round * perRound; entries != want {
			t.Fatalf("round %d: %d log entries after reopening, want %d", round, entries, want)
		}
		snap, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range round * perRound {
			if _, err := snap.Get(ctx, fmt.Appendf(nil, "k%06d", i)); err != nil {
				t.Fatalf("round %d: key %d after reopening: %v", round, i, err)
			}
		}
		_ = snap.Close()

		for i := range perRound {
			n := round*perRound + i
			b := new(engine.Batch).Put(fmt.Appendf(nil, "k%06d", n), value).Append(value)
			h, err := e.Submit(ctx, b)
			if err == nil {
				_, err = h.Wait(ctx)
			}
			if err != nil {
				t.Fatalf("commit %d: %v", n, err)
			}
			if i == 10 {
				// A few commits into the newest log, its file already
				// spans the whole reservation.
				name, size := newestWAL(t, dir)
				if size < reserved {
					t.Fatalf("round %d: %s is %d bytes after a few commits, want the reserved %d within the file", round, name, size, reserved)
				}
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// newestWAL returns the name and size of the highest-numbered
// write-ahead log in dir.
func newestWAL(t *testing.T, dir string) (string, int64) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no write-ahead log in %s (%v)", dir, err)
	}
	name := slices.Max(logs)
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(name), fi.Size()
}
