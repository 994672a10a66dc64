//go:build linux && !nopebble

package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
)

// copyDir copies the regular files of src into a new directory, as the
// operating system has them: what a process crash at that moment would
// leave on disk.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// quiesce waits until the engine's Pebble DB runs no flush or compaction,
// so that a copy of its files is one a crash could leave: a copy taken
// file by file while a flush writes could hold a manifest naming a table
// copied before it was whole.
func quiesce(t *testing.T, e engine.Engine) {
	t.Helper()
	d := e.(*db)
	for range 2000 {
		m := d.pdb.Metrics()
		if m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("flushes or compactions still running after 10 s")
}

// TestJournalKeepsCompletedCommits takes the data directory as a process
// crash would leave it (its files copied while the engine is open, after
// the commits completed and before Close flushes the memtables) and opens
// the copy: every completed commit must be there, under SyncNone and
// SyncInterval, with a journal small enough that its halves take turns
// several times, with concurrent committers, and with commits too large
// for a half.
func TestJournalKeepsCompletedCommits(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncNone, engine.SyncInterval} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := t.TempDir()
			// An interval longer than the test: only the journal and the
			// flushes its halves start keep the commits.
			opts := engine.Options{Dir: dir, Sync: mode, SyncInterval: time.Hour, Params: map[string]string{"journal_kb": "128"}}
			e, err := open(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			c := &enginetest.Committer{E: e, ValueSize: 100}
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 300 {
						if err := c.Commit(ctx, fmt.Sprintf("w%d-%d", w, i)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if !e.(*db).popts.DisableWAL {
				t.Fatal("the journal is in use and Pebble writes its WAL too")
			}
			quiesce(t, e)
			crashed := copyDir(t, dir)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			// The copy's journal holds the records of its last round.
			jb, err := os.ReadFile(filepath.Join(crashed, journalName))
			if err != nil {
				t.Fatal(err)
			}
			if n := len(scanJournal(jb)); n == 0 || n >= 1200 {
				t.Fatalf("the journal holds %d records of 1,200 commits: it did not start over, or kept none", n)
			}
			e2, err := open(ctx, engine.Options{Dir: crashed, Sync: mode, SyncInterval: time.Hour, Params: opts.Params})
			if err != nil {
				t.Fatal(err)
			}
			defer e2.Close()
			if got := len(c.Completed()); got != 1200 {
				t.Fatalf("%d commits completed, want 1200", got)
			}
			enginetest.CheckCommitted(t, ctx, e2, c.Completed(), "after a crash")
			// And the reopened store journals on from there, with commits
			// larger than a half of the journal among them.
			c2 := &enginetest.Committer{E: e2, ValueSize: 100}
			big := &enginetest.Committer{E: e2, ValueSize: 100 << 10}
			for i := range 50 {
				if err := c2.Commit(ctx, fmt.Sprintf("after-%d", i)); err != nil {
					t.Fatal(err)
				}
				if i%20 == 10 {
					if err := big.Commit(ctx, fmt.Sprintf("big-%d", i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			quiesce(t, e2)
			again := copyDir(t, crashed)
			e3, err := engine.Open(ctx, Name, engine.Options{Dir: again, Sync: engine.SyncAlways})
			if err != nil {
				t.Fatal(err)
			}
			defer e3.Close()
			all := append(append(c.Completed(), c2.Completed()...), big.Completed()...)
			if len(all) != 1252 {
				t.Fatalf("%d commits completed, want 1252", len(all))
			}
			enginetest.CheckCommitted(t, ctx, e3, all, "after a second crash, opened with SyncAlways")
			if _, err := os.Stat(filepath.Join(again, journalName)); !os.IsNotExist(err) {
				t.Fatalf("SyncAlways kept the applied journal: %v", err)
			}
		})
	}
}

// journalBatch returns the representation of a batch that sets key to
// value and the journal's position to seq, as Submit journals it.
func journalBatch(pdb *pebble.DB, seq uint64, key, value string) []byte {
	b := pdb.NewBatch()
	_ = b.Set([]byte(key), []byte(value), nil)
	var pos [8]byte
	binary.BigEndian.PutUint64(pos[:], seq)
	_ = b.Set(journalKey, pos[:], nil)
	return bytes.Clone(b.Repr())
}

// journalRecords returns records of the given sequence numbers, one batch
// each setting "k<seq>" (an empty batch for empty), with trailing bytes
// after them.
func journalRecords(pdb *pebble.DB, tail []byte, empty uint64, seqs ...uint64) []byte {
	var out []byte
	for _, s := range seqs {
		repr := journalBatch(pdb, s, fmt.Sprintf("k%d", s), "v")
		if s == empty {
			repr = make([]byte, batchHeader)
		}
		rec := make([]byte, journalHeader+len(repr))
		copy(rec[journalHeader:], repr)
		sealJournalRecord(rec, s, len(repr))
		out = append(out, rec...)
	}
	return append(out, tail...)
}

// replayCase is a journal replayed onto a store (TestReplayJournal).
type replayCase struct {
	name    string
	stored  uint64 // the store's position before the replay
	seqs    []uint64
	tail    []byte
	empty   uint64   // the record whose batch is empty
	second  []uint64 // records of the journal's second half
	applied []uint64
	last    uint64
}

// TestReplayJournal checks which journaled commits opening applies: those
// after the store's position, in order, from either half, stopping at a
// record cut short, at one of an earlier round, and not at all past a
// hole; and that they last, through a sync of the WAL or, with the WAL
// disabled (the journal in use), a flush.
func TestReplayJournal(t *testing.T) {
	cases := []replayCase{
		{name: "after the store", stored: 2, seqs: []uint64{1, 2, 3, 4}, applied: []uint64{3, 4}, last: 4},
		{name: "all in the store", stored: 9, seqs: []uint64{7, 8}, last: 9},
		{name: "a record cut short ends it", stored: 0, seqs: []uint64{1, 2}, tail: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, applied: []uint64{1, 2}, last: 2},
		{name: "an earlier round ends it", stored: 4, seqs: []uint64{5, 6, 2, 3}, applied: []uint64{5, 6}, last: 6},
		{name: "a hole applies nothing", stored: 3, seqs: []uint64{6, 7}, last: 7},
		{name: "an empty batch ends it", stored: 0, seqs: []uint64{1, 2, 3, 4}, empty: 3, applied: []uint64{1, 2}, last: 2},
		{name: "the second half leads into the first", stored: 2, seqs: []uint64{5, 6}, second: []uint64{1, 2, 3, 4}, applied: []uint64{3, 4, 5, 6}, last: 6},
		{name: "an earlier round in the other half", stored: 10, seqs: []uint64{11, 12}, second: []uint64{5, 6, 7}, applied: []uint64{11, 12}, last: 12},
		{name: "the first half leads into the second", stored: 0, seqs: []uint64{1, 2}, second: []uint64{3, 4, 5}, applied: []uint64{1, 2, 3, 4, 5}, last: 5},
	}
	for _, tc := range cases {
		for _, journaled := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/journaled=%v", tc.name, journaled), func(t *testing.T) { testReplay(t, tc, journaled) })
		}
	}
}

func testReplay(t *testing.T, tc replayCase, journaled bool) {
	has := func(pdb *pebble.DB, key string) bool {
		_, closer, err := pdb.Get([]byte(key))
		if err == nil {
			closer.Close()
		}
		return err == nil
	}
	dir := t.TempDir()
	popts := &pebble.Options{DisableWAL: journaled, Logger: slogLogger{slog.New(slog.DiscardHandler)}}
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pdb.Close() }()
	if tc.stored > 0 {
		var pos [8]byte
		binary.BigEndian.PutUint64(pos[:], tc.stored)
		if err := pdb.Set(journalKey, pos[:], pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := pdb.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	content := journalRecords(pdb, tc.tail, tc.empty, tc.seqs...)
	if len(tc.second) > 0 {
		half := make([]byte, 4096)
		copy(half, content)
		content = append(half, journalRecords(pdb, nil, 0, tc.second...)...)
		content = append(content, make([]byte, 2*len(half)-len(content))...)
	}
	last, err := replayJournal(pdb, content, journaled, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// What the replay applied lasts: with the WAL disabled only a
	// flush keeps it through the close.
	if err := pdb.Close(); err != nil {
		t.Fatal(err)
	}
	if pdb, err = pebble.Open(dir, popts); err != nil {
		t.Fatal(err)
	}
	if last != tc.last {
		t.Errorf("replay returned position %d, want %d", last, tc.last)
	}
	// The store holds that position, so the records written next
	// follow it at the next open.
	if stored, err := journaledSeq(pdb); err != nil || stored != tc.last {
		t.Errorf("the store's position after the replay: %d (%v), want %d", stored, err, tc.last)
	}
	for _, s := range append(tc.seqs, tc.second...) {
		want := false
		for _, a := range tc.applied {
			want = want || a == s
		}
		if got := has(pdb, fmt.Sprintf("k%d", s)); got != want {
			t.Errorf("record %d applied: %v, want %v", s, got, want)
		}
	}
}

// TestJournalTakesOverWALStore opens, with the journal, a store that
// Pebble's WAL holds commits of (written under SyncAlways, taken as a
// crash leaves it), and the other way round: every completed commit must
// survive each change of mode, crash after crash.
func TestJournalTakesOverWALStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var done []string
	for round, mode := range []engine.SyncMode{engine.SyncAlways, engine.SyncNone, engine.SyncAlways, engine.SyncInterval, engine.SyncNone} {
		e, err := open(ctx, engine.Options{Dir: dir, Sync: mode, SyncInterval: time.Hour, Params: map[string]string{"journal_kb": "128"}})
		if err != nil {
			t.Fatalf("round %d (%v): open: %v", round, mode, err)
		}
		if journaled := e.(*db).popts.DisableWAL; journaled != (mode != engine.SyncAlways) {
			t.Fatalf("round %d (%v): Pebble's WAL disabled: %v", round, mode, journaled)
		}
		enginetest.CheckCommitted(t, ctx, e, done, fmt.Sprintf("round %d (%v), at open", round, mode))
		c := &enginetest.Committer{E: e, ValueSize: 100}
		for i := range 600 {
			if err := c.Commit(ctx, fmt.Sprintf("r%d-%d", round, i)); err != nil {
				t.Fatal(err)
			}
		}
		done = append(done, c.Completed()...)
		quiesce(t, e)
		crashed := copyDir(t, dir)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		dir = crashed
	}
	e, err := open(ctx, engine.Options{Dir: dir, Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if len(done) != 3000 {
		t.Fatalf("%d commits completed, want 3000", len(done))
	}
	enginetest.CheckCommitted(t, ctx, e, done, "after the last crash")
}
