package table_test

import (
	"context"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/table"
)

// RangeFrom visits the live records at or after its start id, in id
// order, and none of another table.
func TestRangeFrom(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	put(t, db, "idx", "a", "1", "b", "2", "b\x00x", "3", "c", "4", "d", "5")
	put(t, db, "idy", "z", "9")
	tx := db.Begin()
	if err := tx.Delete("idx", "c"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := db.RangeFrom(ctx, "idx", "b\x00", func(r table.Record) bool {
		got = append(got, r.ID)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b\x00x", "d"}; !slices.Equal(got, want) {
		t.Fatalf("RangeFrom(b NUL) = %q, want %q", got, want)
	}
	got = got[:0]
	if err := db.RangeFrom(ctx, "idx", "", func(r table.Record) bool {
		got = append(got, r.ID)
		return len(got) < 2
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("RangeFrom stopped early = %q, want %q", got, want)
	}
}
