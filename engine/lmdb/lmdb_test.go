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

	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Engine: "lmdb"})
}

// BenchmarkCommits measures synced commits at 1, 16 and 64 concurrent
// submitters; group commit shows as commits/s rising with submitters.
func BenchmarkCommits(b *testing.B) {
	conformance.BenchmarkCommits(b, conformance.Target{Engine: "lmdb"})
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
	// Readers run through the resizes.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if v, err := engine.Get(ctx, e, []byte("before/03")); err != nil || string(v) != "before/03" {
					errs <- fmt.Errorf("concurrent get = %q, %v", v, err)
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
