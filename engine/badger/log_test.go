//go:build !nobadger

package badger

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// storedLogKeys lists the log keys on disk, below the floor included.
func storedLogKeys(t *testing.T, d *db) []engine.LogKey {
	t.Helper()
	var out []engine.LogKey
	txn := d.newTxn(false)
	defer d.endTxn(txn)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k, err := kvlog.KeyOf(it.Item().Key())
		if err != nil {
			t.Fatalf("stored log key: %v", err)
		}
		out = append(out, k)
	}
	return out
}

// TestTruncateInBatches truncates more entries than one delete batch holds
// and checks every entry below the floor is gone from disk.
func TestTruncateInBatches(t *testing.T) {
	d := openDB(t, t.TempDir())
	var keys []engine.LogKey
	for c := 0; c < 5; c++ {
		b := new(engine.Batch)
		for i := 0; i < 3000; i++ {
			b.Append([]byte(fmt.Sprint(c, "/", i)))
		}
		res, err := engine.Commit(t.Context(), d, b)
		if err != nil {
			t.Fatalf("commit %d: %v", c, err)
		}
		keys = append(keys, res.Keys[0])
	}
	if err := d.Truncate(t.Context(), keys[4]); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	for _, k := range storedLogKeys(t, d) {
		if k < keys[4] {
			t.Fatalf("log key %d below the floor %d is still stored", k, keys[4])
		}
	}
	st, err := d.LogStats(t.Context())
	if err != nil {
		t.Fatalf("log stats: %v", err)
	}
	if st.Entries != 3000 || st.First != keys[4] || st.Floor != keys[4] || st.Bytes == 0 {
		t.Fatalf("log stats = %+v, want 3000 entries from %d", st, keys[4])
	}
	err = d.Truncate(t.Context(), maxTruncate+1)
	if !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("truncate beyond the key space: got %v, want ErrInvalidOption", err)
	}
}

// TestTruncateAboveLastKeyKeepsNewCommitsVisible truncates above every key
// issued so far and checks a later commit still lands at or above the
// floor, where scans see it.
func TestTruncateAboveLastKeyKeepsNewCommitsVisible(t *testing.T) {
	d := openDB(t, t.TempDir())
	res, err := engine.Commit(t.Context(), d, new(engine.Batch).Append([]byte("old")))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	floor := res.Keys[0] + 1<<32 // far ahead of the clock
	if err := d.Truncate(t.Context(), floor); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	res, err = engine.Commit(t.Context(), d, new(engine.Batch).Append([]byte("new")))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if res.Keys[0] < floor {
		t.Fatalf("key %d issued below the floor %d", res.Keys[0], floor)
	}
	if got := logValues(t, d, floor); len(got) != 1 || got[0] != "new" {
		t.Fatalf("scan from the floor = %q, want [new]", got)
	}
}

// TestOpenFinishesInterruptedTruncation persists a floor without deleting
// below it, as a crash between the two steps of Truncate leaves it, and
// checks the next open removes the rest.
func TestOpenFinishesInterruptedTruncation(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	var keys []engine.LogKey
	for i := 0; i < 10; i++ {
		res, err := engine.Commit(t.Context(), d, new(engine.Batch).Append([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		keys = append(keys, res.Keys[0])
	}
	if err := d.setFloor(keys[6]); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	if n := len(storedLogKeys(t, d)); n != 10 {
		t.Fatalf("setting the floor alone removed entries: %d left", n)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	d2 := openDB(t, dir)
	stored := storedLogKeys(t, d2)
	if len(stored) != 4 || stored[0] != keys[6] {
		t.Fatalf("after reopen the stored log keys are %v, want the 4 from %d", stored, keys[6])
	}
	err := d2.ScanLog(t.Context(), keys[5], false, func(engine.Entry) bool { return true })
	if !errors.Is(err, engine.ErrLogTruncated) {
		t.Fatalf("scan below the floor: got %v, want ErrLogTruncated", err)
	}
}

// TestScanLogPages scans a log longer than one page, stopping and resuming
// across page boundaries, and lets fn call back into the engine.
func TestScanLogPages(t *testing.T) {
	d := openDB(t, t.TempDir())
	b := new(engine.Batch)
	const n = 3*scanPage + 7
	for i := 0; i < n; i++ {
		b.Append([]byte(fmt.Sprint(i)))
	}
	if _, err := engine.Commit(t.Context(), d, b); err != nil {
		t.Fatalf("commit: %v", err)
	}
	seen := 0
	err := d.ScanLog(t.Context(), 0, false, func(e engine.Entry) bool {
		if string(e.Value) != fmt.Sprint(seen) || e.Index != uint32(seen) || e.Count != n {
			t.Fatalf("entry %d = %q index %d count %d", seen, e.Value, e.Index, e.Count)
		}
		seen++
		if seen%scanPage == 0 {
			// A commit from inside fn must not deadlock the scan.
			if _, err := engine.Commit(t.Context(), d, new(engine.Batch).Put([]byte("from-fn"), []byte("x"))); err != nil {
				t.Fatalf("commit inside scan: %v", err)
			}
		}
		return true
	})
	if err != nil || seen != n {
		t.Fatalf("scan: %d of %d entries, err %v", seen, n, err)
	}
}

// TestEmptyValueSurvivesReopen checks an empty value stays a value, not an
// absence, once Badger replays it from disk.
func TestEmptyValueSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	if _, err := engine.Commit(t.Context(), d, new(engine.Batch).Put([]byte("empty"), []byte{})); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	d2 := openDB(t, dir)
	if v := mustGet(t, d2, "empty"); len(v) != 0 {
		t.Fatalf("empty value reads back as %q", v)
	}
	if _, err := engine.Commit(t.Context(), d2, new(engine.Batch).Expect([]byte("empty"), nil).Append([]byte("e"))); err != nil {
		t.Fatalf("expect empty value after reopen: %v", err)
	}
}

// TestLargeValuesInValueLog stores values above the threshold, which live
// in Badger's value log, and reads them back through every read path.
func TestLargeValuesInValueLog(t *testing.T) {
	dir := t.TempDir()
	d := openDB(t, dir)
	big := bytes.Repeat([]byte("L"), int(d.lim.valueThreshold)*3)
	if _, err := engine.Commit(t.Context(), d, new(engine.Batch).Put([]byte("big"), big).Append(big)); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, err := engine.Commit(t.Context(), d, new(engine.Batch).Expect([]byte("big"), big).Put([]byte("checked"), []byte("y"))); err != nil {
		t.Fatalf("expect on a value-log value: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	d2 := openDB(t, dir)
	if v := mustGet(t, d2, "big"); !bytes.Equal(v, big) {
		t.Fatalf("get: %d bytes back, want %d", len(v), len(big))
	}
	if got := logValues(t, d2, 0); len(got) != 1 || got[0] != string(big) {
		t.Fatalf("log value not read back whole")
	}
	snap, err := d2.Snapshot(t.Context())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	it, err := snap.Iter(t.Context(), []byte("big"), []byte("bih"))
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	if !it.Next() || string(it.Key()) != "big" || !bytes.Equal(it.Value(), big) {
		t.Fatalf("iterator did not return the value-log value (err %v)", it.Err())
	}
	if it.Next() {
		t.Fatalf("iterator went past the upper bound to %q", it.Key())
	}
}

// TestMetaKeysStayOutOfData checks the floor, stored under the meta
// prefix, never shows up as data.
func TestMetaKeysStayOutOfData(t *testing.T) {
	d := openDB(t, t.TempDir())
	res, err := engine.Commit(t.Context(), d, new(engine.Batch).Put([]byte("z"), []byte("1")).Append([]byte("x")))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if err := d.Truncate(t.Context(), res.Keys[0]); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	snap, err := d.Snapshot(t.Context())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	it, err := snap.Iter(t.Context(), nil, nil)
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key()))
	}
	if len(keys) != 1 || keys[0] != "z" {
		t.Fatalf("data keys = %q, want [z]", keys)
	}
	if _, err := snap.Get(t.Context(), kvlog.MetaFloor[1:]); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("meta key readable as data: %v", err)
	}
}
