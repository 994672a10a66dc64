package table_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/table"
)

// TestStateWritesLeaveNoLogOrTombstone: PutState and DeleteState change
// records without change-log entries, DeleteState leaves no tombstone, and
// preconditions see state records like any other.
func TestStateWritesLeaveNoLogOrTombstone(t *testing.T) {
	ctx := t.Context()
	db, _ := openDB(t)
	before, err := db.LogStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx := db.Begin()
	tx.ExpectAbsent("state", "slot")
	tx.PutState("state", "slot", []byte("v1"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := db.Get(ctx, "state", "slot")
	if err != nil || string(rec.Value) != "v1" {
		t.Fatalf("get = %+v, %v", rec, err)
	}
	tx = db.Begin()
	tx.ExpectAbsent("state", "slot")
	tx.PutState("state", "slot", []byte("v2"))
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("put-if-absent over a state record: %v, want a conflict", err)
	}
	tx = db.Begin()
	tx.ExpectVersion("state", "slot", rec.Version)
	tx.DeleteState("state", "slot")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, "state", "slot"); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("get after DeleteState: %v", err)
	}
	ts, err := db.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ts {
		if s.Name == "state" {
			t.Fatalf("DeleteState left %+v", s)
		}
	}
	after, err := db.LogStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Entries != before.Entries {
		t.Fatalf("state writes appended %d log entries", after.Entries-before.Entries)
	}
	tx = db.Begin()
	tx.Put("visible", "a", []byte("x"))
	tx.Put("visible", "b", []byte("y"))
	tx.Delete("visible", "b")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ts, err = db.Tables(ctx)
	if err != nil || len(ts) != 1 || ts[0] != (table.TableStats{Name: "visible", Live: 1, Deleted: 1}) {
		t.Fatalf("tables = %+v, %v", ts, err)
	}
}

// TestUncheckedStateWrites: PutStateUnchecked is readable like PutState,
// invisible to preconditions, and DeleteStateUnchecked removes it without
// a trace.
func TestUncheckedStateWrites(t *testing.T) {
	ctx := t.Context()
	db, _ := openDB(t)
	tx := db.Begin()
	tx.PutStateUnchecked("out", "slot", []byte("v1"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := db.Get(ctx, "out", "slot")
	if err != nil || string(rec.Value) != "v1" || rec.Version == 0 {
		t.Fatalf("get = %+v, %v", rec, err)
	}
	tx = db.Begin()
	tx.ExpectVersion("out", "slot", rec.Version)
	tx.PutStateUnchecked("out", "slot", []byte("v2"))
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("a version check on unchecked state: %v, want a conflict (no version kept)", err)
	}
	tx = db.Begin()
	tx.ExpectAbsent("out", "slot")
	tx.PutStateUnchecked("out", "slot", []byte("v3"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("an absence check on unchecked state: %v, want it to pass", err)
	}
	if rec, err := db.Get(ctx, "out", "slot"); err != nil || string(rec.Value) != "v3" {
		t.Fatalf("get = %+v, %v", rec, err)
	}
	tx = db.Begin()
	tx.DeleteStateUnchecked("out", "slot")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, "out", "slot"); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("get after DeleteStateUnchecked: %v", err)
	}
	ts, err := db.Tables(ctx)
	if err != nil || len(ts) != 0 {
		t.Fatalf("tables after DeleteStateUnchecked = %+v, %v", ts, err)
	}
	st, err := db.LogStats(ctx)
	if err != nil || st.Entries != 0 {
		t.Fatalf("unchecked state writes: log %+v, %v; want no entries", st, err)
	}
}

// TestStateChecks: ExpectNoState and ExpectState see what PutStateUnchecked
// wrote, by the record alone: a slot staged once (first write wins), then
// released only as staged, at the version and with the value staged.
func TestStateChecks(t *testing.T) {
	ctx := t.Context()
	db, _ := openDB(t)
	stage := func(value string) (table.Version, error) {
		tx := db.Begin()
		tx.ExpectNoState("staged", "c/1")
		tx.PutStateUnchecked("staged", "c/1", []byte(value))
		err := tx.Commit(ctx)
		return tx.Version(), err
	}
	v, err := stage("first")
	if err != nil {
		t.Fatalf("stage a free slot: %v", err)
	}
	if _, err := stage("second"); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("stage a taken slot: %v, want a conflict", err)
	}
	release := func(v table.Version, value string) error {
		tx := db.Begin()
		tx.ExpectState("staged", "c/1", v, []byte(value))
		tx.DeleteStateUnchecked("staged", "c/1")
		return tx.Commit(ctx)
	}
	if err := release(v, "second"); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("release with another value: %v, want a conflict", err)
	}
	if err := release(v+1, "first"); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("release at another version: %v, want a conflict", err)
	}
	if err := release(v, "first"); err != nil {
		t.Fatalf("release as staged: %v", err)
	}
	if err := release(v, "first"); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("second release: %v, want a conflict", err)
	}
	if _, err := stage("third"); err != nil {
		t.Fatalf("stage the slot again after its release: %v", err)
	}
	// A record written by PutState passes the same checks.
	tx := db.Begin()
	tx.PutState("staged", "c/2", []byte("kept"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx2 := db.Begin()
	tx2.ExpectState("staged", "c/2", tx.Version(), []byte("kept"))
	tx2.DeleteState("staged", "c/2")
	if err := tx2.Commit(ctx); err != nil {
		t.Fatalf("ExpectState on a PutState record: %v", err)
	}
}

// appendedValue is a table.ValueAppender of a fixed value that counts its
// calls.
type appendedValue struct {
	v            []byte
	sizes, calls int
}

func (a *appendedValue) ValueSize() int { a.sizes++; return len(a.v) }
func (a *appendedValue) AppendValue(b []byte) []byte {
	a.calls++
	return append(b, a.v...)
}

// TestPutStateUncheckedFrom: a value appended at Submit is stored as if
// it had been put, in a commit with other writes, its appender asked once.
func TestPutStateUncheckedFrom(t *testing.T) {
	ctx := t.Context()
	db, _ := openDB(t)
	vals := []*appendedValue{{v: []byte("first")}, {v: bytes.Repeat([]byte("x"), 4096)}, {v: nil}}
	tx := db.Begin()
	for i, v := range vals {
		if err := tx.PutStateUncheckedFrom("out", fmt.Sprint("slot", i), v); err != nil {
			t.Fatal(err)
		}
	}
	tx.PutStateUnchecked("out", "plain", []byte("p"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		rec, err := db.Get(ctx, "out", fmt.Sprint("slot", i))
		if err != nil || !bytes.Equal(rec.Value, v.v) {
			t.Fatalf("slot%d = %q, %v; want %q", i, rec.Value, err, v.v)
		}
		if v.sizes != 1 || v.calls != 1 {
			t.Fatalf("slot%d: ValueSize called %d times and AppendValue %d, want once each", i, v.sizes, v.calls)
		}
	}
	if rec, err := db.Get(ctx, "out", "plain"); err != nil || string(rec.Value) != "p" {
		t.Fatalf("plain = %+v, %v", rec, err)
	}
}
