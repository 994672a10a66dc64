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
// end of the file), reserved a step (4 MiB) at a time, and that the store
// reopens whole over such logs: the newest one ends in zeros, and older
// ones end in their trailers with zeros after them. Each round writes
// about 24 MiB, so that a log outgrows its first step, and the next round
// reopens the store.
func TestWALPreallocatedWithinFile(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := engine.Options{Dir: dir, Sync: engine.SyncAlways, Params: map[string]string{"memtable_mb": "16"}}
	const step = 4 << 20 // walReserveStep
	value := bytes.Repeat([]byte("v"), 8<<10)
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
				// A few commits into the newest log, its file spans the
				// first step of its reservation.
				if name, size := newestWAL(t, dir); size != step {
					t.Fatalf("round %d: %s is %d bytes after a few commits, want the reserved %d within the file", round, name, size, step)
				}
			}
		}
		// Every log is reserved whole steps at a time, and the memtable
		// grew to hold more than a step: past the first, the next was
		// reserved.
		logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
		if err != nil {
			t.Fatal(err)
		}
		var largest int64
		for _, l := range logs {
			fi, err := os.Stat(l)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size()%step != 0 {
				t.Fatalf("round %d: %s is %d bytes, not a whole number of %d-byte steps", round, filepath.Base(l), fi.Size(), step)
			}
			largest = max(largest, fi.Size())
		}
		if largest < 2*step {
			t.Fatalf("round %d: the largest log is %d bytes after %d commits of %d bytes, want at least two steps", round, largest, perRound, 2*len(value))
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
