package table_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

func TestUpdateCommitsAllOrNothing(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	err := db.Update(ctx, func(tx *table.Tx) error {
		if err := tx.Put("acct", "a", []byte("90")); err != nil {
			return err
		}
		return tx.Put("acct", "b", []byte("110"))
	})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	refused := errors.New("refused")
	err = db.Update(ctx, func(tx *table.Tx) error {
		_ = tx.Put("acct", "a", []byte("0"))
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("update whose fn failed: %v, want fn's error", err)
	}
	err = db.Update(ctx, func(tx *table.Tx) error {
		_ = tx.ExpectAbsent("acct", "b")
		return tx.Put("acct", "a", []byte("1"))
	})
	if !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("update with a failed precondition: %v, want ErrConflict", err)
	}
	if r, err := db.Get(ctx, "acct", "a"); err != nil || string(r.Value) != "90" {
		t.Fatalf("a after the failed updates: %q, %v; want 90", r.Value, err)
	}
}

func TestViewIsOneSnapshot(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	put := func(id, v string) {
		t.Helper()
		if err := db.Update(ctx, func(tx *table.Tx) error { return tx.Put("kv", id, []byte(v)) }); err != nil {
			t.Fatalf("put %s: %v", id, err)
		}
	}
	put("a", "1")
	put("b", "2")
	var escaped *table.View
	err := db.View(ctx, func(v *table.View) error {
		escaped = v
		put("a", "changed") // committed after the view was taken
		put("c", "3")
		r, err := v.Get("kv", "a")
		if err != nil || string(r.Value) != "1" {
			t.Errorf("view's a: %q, %v; want the value before the view, 1", r.Value, err)
		}
		if _, err := v.Get("kv", "c"); !errors.Is(err, table.ErrNotFound) {
			t.Errorf("view's c: %v, want ErrNotFound (written after the view)", err)
		}
		var ids []string
		if err := v.Range("kv", "", func(r table.Record) bool { ids = append(ids, r.ID+"="+string(r.Value)); return true }); err != nil {
			return err
		}
		if len(ids) != 2 || ids[0] != "a=1" || ids[1] != "b=2" {
			t.Errorf("view's range: %v, want [a=1 b=2]", ids)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("view: %v", err)
	}
	if _, err := escaped.Get("kv", "a"); !errors.Is(err, table.ErrClosed) {
		t.Fatalf("a view used after View returned: %v, want ErrClosed", err)
	}
}
