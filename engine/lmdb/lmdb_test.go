//go:build cgo && !nolmdb

package lmdb_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/conformance/conformancetest"
	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformancetest.Run(t, conformance.Target{Engine: "lmdb"})
}

// BenchmarkCommits measures synced commits at 1, 16 and 64 concurrent
// submitters; group commit shows as commits/s rising with submitters.
func BenchmarkCommits(b *testing.B) {
	benchtest.Commits(b, "lmdb")
}

func BenchmarkSlots(b *testing.B) {
	benchtest.Slots(b, "lmdb")
}

func BenchmarkLogStats(b *testing.B) {
	benchtest.LogStats(b, "lmdb")
}

func openLMDB(t *testing.T, dir string, params map[string]string) engine.Engine {
	t.Helper()
	e, err := engine.Open(t.Context(), "lmdb", engine.Options{Dir: dir, Params: params})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func dataFileSize(t *testing.T, dir string) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, "data.mdb"))
	if err != nil {
		t.Fatalf("stat data file: %v", err)
	}
	return fi.Size()
}

// TestMapGrows starts with a 1 MiB map and writes well past it, from
// concurrent submitters, while a snapshot taken before the first growth and
// an iterator half-way through its range stay open: every commit lands,
// the snapshot keeps its view across the map resizes, and everything
// survives a reopen.
func TestMapGrows(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	e := openLMDB(t, dir, map[string]string{"map_size_mb": "1"})

	for i := range 10 {
		k := fmt.Sprintf("before/%02d", i)
		if _, err := engine.Commit(ctx, e, new(engine.Batch).Put([]byte(k), []byte(k))); err != nil {
			t.Fatalf("commit %s: %v", k, err)
		}
	}
	snap, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	it, err := snap.Iter(ctx, nil, nil)
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	for range 5 {
		if !it.Next() {
			t.Fatalf("iterator ended early: %v", it.Err())
		}
	}

	const workers, each, valSize = 8, 40, 64 << 10 // 20 MiB of values
	val := func(w, i int) []byte { return bytes.Repeat([]byte{byte('a' + (w*each+i)%26)}, valSize) }
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := fmt.Sprintf("big/%d/%03d", w, i)
				if _, err := engine.Commit(ctx, e, new(engine.Batch).Put([]byte(k), val(w, i)).Append([]byte(k))); err != nil {
					errs <- fmt.Errorf("commit %s: %w", k, err)
					return
				}
			}
		}()
	}
	// Readers run through the resizes: short snapshots, and one held open
	// and iterated again and again.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	held, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer held.Close()
	reads := map[string]func() error{
		"get": func() error {
			if v, err := engine.Get(ctx, e, []byte("before/03")); err != nil || string(v) != "before/03" {
				return fmt.Errorf("concurrent get = %q, %w", v, err)
			}
			return nil
		},
		"iterate": func() error {
			it, err := held.Iter(ctx, []byte("before/"), []byte("before0"))
			if err != nil {
				return err
			}
			defer it.Close()
			n := 0
			for it.Next() {
				n++
			}
			if it.Err() != nil || n != 10 {
				return fmt.Errorf("held snapshot iterated %d keys, err %w; want 10", n, it.Err())
			}
			return nil
		},
	}
	for _, read := range reads {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := read(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The data file never outgrows the map, so a file this size means the
	// map grew from 1 MiB.
	if size := dataFileSize(t, dir); size < 16<<20 {
		t.Fatalf("data file is %d bytes after writing 20 MiB: the writes did not land", size)
	}

	// The snapshot still sees exactly the ten keys it was taken with, and
	// the iterator resumes where it stopped.
	n := 5
	for it.Next() {
		if want := fmt.Sprintf("before/%02d", n); string(it.Key()) != want || string(it.Value()) != want {
			t.Fatalf("iterator after growth at %q=%q, want %q", it.Key(), it.Value(), want)
		}
		n++
	}
	if err := it.Err(); err != nil || n != 10 {
		t.Fatalf("iterator after growth: %d keys, err %v; want 10", n, err)
	}
	if _, err := snap.Get(ctx, []byte("big/0/000")); err == nil {
		t.Fatalf("snapshot taken before the writes sees one of them")
	}

	check := func(e engine.Engine) {
		t.Helper()
		for w := range workers {
			for i := range each {
				k := fmt.Sprintf("big/%d/%03d", w, i)
				v, err := engine.Get(ctx, e, []byte(k))
				if err != nil || !bytes.Equal(v, val(w, i)) {
					t.Fatalf("get %s: %d bytes, %v", k, len(v), err)
				}
			}
		}
		st, err := e.LogStats(ctx)
		if err != nil || st.Entries != workers*each {
			t.Fatalf("log stats = %+v, %v; want %d entries", st, err, workers*each)
		}
	}
	check(e)
	it.Close()
	snap.Close()
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	check(openLMDB(t, dir, map[string]string{"map_size_mb": "1"}))
}

// TestOneEnginePerDirectory checks a directory cannot be opened twice at
// once, and can be again after Close.
func TestOneEnginePerDirectory(t *testing.T) {
	dir := t.TempDir()
	e := openLMDB(t, dir, nil)
	if e2, err := engine.Open(t.Context(), "lmdb", engine.Options{Dir: dir}); err == nil {
		e2.Close()
		t.Fatalf("second open of a directory in use succeeded")
	}
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	openLMDB(t, dir, nil)
}

// TestReaderSlotsWait fills every reader slot with snapshots: a further
// snapshot waits for a slot (until its context ends) instead of failing
// with an LMDB error, and gets one as soon as a snapshot closes.
func TestReaderSlotsWait(t *testing.T) {
	e := openLMDB(t, t.TempDir(), map[string]string{"max_readers": "4"})
	ctx := t.Context()
	var snaps []engine.Snapshot
	for range 4 {
		s, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		snaps = append(snaps, s)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := e.Snapshot(short); err == nil || !errorsIsDeadline(err) {
		t.Fatalf("fifth snapshot with all slots held: err %v, want a deadline error", err)
	}
	got := make(chan error, 1)
	go func() {
		s, err := e.Snapshot(ctx)
		if err == nil {
			s.Close()
		}
		got <- err
	}()
	snaps[0].Close()
	if err := <-got; err != nil {
		t.Fatalf("snapshot after a slot freed: %v", err)
	}
	for _, s := range snaps[1:] {
		s.Close()
	}
}

func errorsIsDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// TestGroupChecksSeeEarlierCommits submits commits back to back without
// waiting, so the writer groups them: each check sees the commits queued
// ahead of it, and a failing one changes nothing for its neighbours.
func TestGroupChecksSeeEarlierCommits(t *testing.T) {
	e := openLMDB(t, t.TempDir(), nil)
	ctx := t.Context()
	for round := range 50 {
		x, y := fmt.Sprintf("x%d", round), fmt.Sprintf("y%d", round)
		batches := []*engine.Batch{
			new(engine.Batch).ExpectAbsent([]byte(x)).Put([]byte(x), []byte("1")).Append([]byte("a")),
			new(engine.Batch).ExpectAbsent([]byte(x)).Put([]byte(x), []byte("lost")).Append([]byte("b")),
			new(engine.Batch).Expect([]byte(x), []byte("1")).Put([]byte(y), []byte("2")).Append([]byte("c")),
		}
		var hs []*engine.Handle
		for _, b := range batches {
			h, err := e.Submit(ctx, b)
			if err != nil {
				t.Fatalf("submit: %v", err)
			}
			hs = append(hs, h)
		}
		ra, errA := hs[0].Wait(ctx)
		_, errB := hs[1].Wait(ctx)
		rc, errC := hs[2].Wait(ctx)
		if errA != nil || !errors.Is(errB, engine.ErrConflict) || errC != nil {
			t.Fatalf("round %d: errors %v, %v, %v; want nil, conflict, nil", round, errA, errB, errC)
		}
		if rc.Keys[0] <= ra.Keys[0] {
			t.Fatalf("round %d: key %d of the third commit not above %d", round, rc.Keys[0], ra.Keys[0])
		}
		for k, want := range map[string]string{x: "1", y: "2"} {
			if v, err := engine.Get(ctx, e, []byte(k)); err != nil || string(v) != want {
				t.Fatalf("round %d: get %s = %q, %v; want %q", round, k, v, err, want)
			}
		}
	}
	var vals []string
	if err := e.ScanLog(ctx, 0, false, func(en engine.Entry) bool {
		vals = append(vals, string(en.Value))
		return true
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if len(vals) != 100 {
		t.Fatalf("log has %d entries, want 100 (the conflicting commits must append nothing)", len(vals))
	}
	for _, v := range vals {
		if v == "b" {
			t.Fatalf("a conflicting commit's log entry is in the log")
		}
	}
}

// TestTruncateInRounds truncates more entries than one truncation
// transaction removes and checks the floor, the stats and the scans.
func TestTruncateInRounds(t *testing.T) {
	dir := t.TempDir()
	e := openLMDB(t, dir, nil)
	ctx := t.Context()
	var keys []engine.LogKey
	for range 12 {
		b := new(engine.Batch)
		for range 1000 {
			b.Append([]byte("entry"))
		}
		res, err := engine.Commit(ctx, e, b)
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		keys = append(keys, res.Keys...)
	}
	below := keys[11000]
	if err := e.Truncate(ctx, below); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	check := func(e engine.Engine) {
		t.Helper()
		st, err := e.LogStats(ctx)
		if err != nil {
			t.Fatalf("log stats: %v", err)
		}
		if st.Entries != 1000 || st.First != below || st.Last != keys[len(keys)-1] || st.Floor != below {
			t.Fatalf("log stats = %+v; want 1000 entries from %d to %d, floor %d", st, below, keys[len(keys)-1], below)
		}
		if err := e.ScanLog(ctx, keys[10999], false, func(engine.Entry) bool { return true }); !errors.Is(err, engine.ErrLogTruncated) {
			t.Fatalf("scan below the floor: %v, want ErrLogTruncated", err)
		}
		n := 0
		if err := e.ScanLog(ctx, below, false, func(en engine.Entry) bool {
			if en.Key != keys[11000+n] || en.Index != 0 || en.Count != 1 {
				t.Fatalf("entry %d = key %d index %d count %d; want key %d index 0 count 1", n, en.Key, en.Index, en.Count, keys[11000+n])
			}
			n++
			return true
		}); err != nil || n != 1000 {
			t.Fatalf("scan from the floor: %d entries, err %v; want 1000", n, err)
		}
	}
	check(e)
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	check(openLMDB(t, dir, nil))
}

// TestSyncModes commits under each sync mode from concurrent submitters,
// closes, and finds every completed commit after reopening.
func TestSyncModes(t *testing.T) {
	for _, mode := range []engine.SyncMode{engine.SyncAlways, engine.SyncInterval, engine.SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			ctx := t.Context()
			e, err := engine.Open(ctx, "lmdb", engine.Options{Dir: dir, Sync: mode, SyncInterval: 5 * time.Millisecond})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { _ = e.Close() })
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 50 {
						k := fmt.Sprintf("%d/%d", w, i)
						if _, err := engine.Commit(ctx, e, new(engine.Batch).Put([]byte(k), []byte(k)).Append([]byte(k))); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("commit: %v", err)
			}
			if err := e.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			e2 := openLMDB(t, dir, nil)
			for w := range 8 {
				for i := range 50 {
					k := fmt.Sprintf("%d/%d", w, i)
					if v, err := engine.Get(ctx, e2, []byte(k)); err != nil || string(v) != k {
						t.Fatalf("get %s after reopen = %q, %v", k, v, err)
					}
				}
			}
			if st, err := e2.LogStats(ctx); err != nil || st.Entries != 400 {
				t.Fatalf("log stats after reopen = %+v, %v; want 400 entries", st, err)
			}
		})
	}
}

func BenchmarkEmptyRange(b *testing.B) {
	benchtest.EmptyRange(b, "lmdb")
}
