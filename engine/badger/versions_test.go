//go:build !nobadger

package badger

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

func put(t *testing.T, d *db, key, value string) {
	t.Helper()
	b := new(engine.Batch)
	b.Put([]byte(key), []byte(value))
	if _, err := submit(t, d, b).Wait(t.Context()); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, s engine.Snapshot, key string) string {
	t.Helper()
	v, err := s.Get(t.Context(), []byte(key))
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(v)
}

// storedVersions counts the versions Badger holds of key.
func storedVersions(t *testing.T, d *db, key string) int {
	t.Helper()
	txn := d.newTxn(false)
	defer d.endTxn(txn)
	it := txn.NewIterator(badger.IteratorOptions{AllVersions: true, Prefix: kvlog.DataKey(nil, []byte(key))})
	defer it.Close()
	n := 0
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// TestVersionsContinueAfterReopen overwrites a key after a reopen: versions
// issued before the reopen must not hide the new value.
func TestVersionsContinueAfterReopen(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	for i := range 5 {
		put(t, d, "k", fmt.Sprint("old", i))
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openDB(t, dir)
	put(t, d, "k", "new")
	s, err := d.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v := get(t, s, "k"); v != "new" {
		t.Fatalf("k = %q after reopen and overwrite, want new", v)
	}
}

// TestDiscardKeepsWhatSnapshotsRead lets compaction drop old versions
// while a snapshot is open: the snapshot still reads its value, and once
// it closes, compaction keeps only the newest version.
func TestDiscardKeepsWhatSnapshotsRead(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	put(t, d, "k", "v0")
	s, err := d.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Dropping a prefix flushes the memtable and compacts the tables that
	// hold the prefix: with the junk key beside k in every table, each
	// flush rewrites k's versions, dropping those at or below the discard
	// version but the newest.
	flush := func() {
		t.Helper()
		d.bdb.SetDiscardTs(d.ver.discardable())
		put(t, d, "junk", "x")
		if err := d.bdb.DropPrefix(kvlog.DataKey(nil, []byte("junk"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 8; i++ {
		put(t, d, "k", fmt.Sprint("v", i))
		flush()
	}
	if v := get(t, s, "k"); v != "v0" {
		t.Fatalf("snapshot reads %q after compaction, want v0", v)
	}
	if n := storedVersions(t, d, "k"); n < 2 {
		t.Fatalf("%d versions kept while a snapshot reads the oldest", n)
	}
	s.Close()
	put(t, d, "k", "v9")
	flush()
	if n := storedVersions(t, d, "k"); n != 1 {
		t.Fatalf("%d versions kept with no snapshot open, want 1", n)
	}
}
