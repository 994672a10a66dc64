package table_test

import (
	"errors"
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
