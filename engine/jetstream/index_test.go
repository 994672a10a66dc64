//go:build !nojetstream

package jetstream

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// indexRecords returns every record the index holds, deleted ones
// included.
func indexRecords(t *testing.T, d *db) map[string]version {
	t.Helper()
	it, err := d.idx.db.NewIter([]byte{prefixRecord}, []byte{prefixRecord + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = it.Close() }()
	out := map[string]version{}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := decodeVersion(it.Value())
		if err != nil {
			t.Fatalf("record of %q: %v", it.Key()[1:], err)
		}
		v.val = bytes.Clone(v.val)
		out[string(it.Key()[1:])] = v
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

// indexDirs lists the index directories under dir.
func indexDirs(t *testing.T, dir string) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(dir, indexDirPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestJetStreamIndexDirectory: the index lives in a directory of its own
// under the data directory while the engine is open, and goes with it;
// one a crash left behind is removed by the next open, which rebuilds the
// index from the stream.
func TestJetStreamIndexDirectory(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openWALAt(t, dir)
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte("k"), []byte("v"))); err != nil {
		t.Fatal(err)
	}
	if got := indexDirs(t, dir); len(got) != 1 {
		t.Fatalf("open engine: index directories %v, want one", got)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := indexDirs(t, dir); len(got) != 0 {
		t.Fatalf("closed engine: index directories %v left behind", got)
	}
	stale := filepath.Join(dir, indexDirPrefix+"stale")
	if err := os.MkdirAll(filepath.Join(stale, "db"), 0o755); err != nil {
		t.Fatal(err)
	}
	d = openWALAt(t, dir)
	defer func() { _ = d.Close() }()
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale index directory is still there (%v)", err)
	}
	snap, err := d.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = snap.Close() }()
	if v, err := snap.Get(ctx, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after reopen: k = %q, %v; want v", v, err)
	}
}

// TestJetStreamIndexClosedUnderReader: closing the engine closes the
// snapshots and iterators still open on its index; they answer ErrClosed
// instead of reading a closed store.
func TestJetStreamIndexClosedUnderReader(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte("a"), []byte("1")).Put([]byte("b"), []byte("2"))); err != nil {
		t.Fatal(err)
	}
	snap, err := d.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	it, err := snap.Iter(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !it.Next() || string(it.Key()) != "a" || string(it.Value()) != "1" {
		t.Fatalf("first entry %q=%q, %v; want a=1", it.Key(), it.Value(), it.Err())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if it.Next() || !errors.Is(it.Err(), engine.ErrClosed) {
		t.Fatalf("iterator after close: err %v, want ErrClosed", it.Err())
	}
	if _, err := snap.Get(ctx, []byte("a")); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("snapshot get after close: %v, want ErrClosed", err)
	}
	_ = it.Close()
	_ = snap.Close()
}
