package table_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// RangeAfter read in pages of three gives every record with the prefix
// once, in Range's order, long ids (keyed by their hash) among them, and
// a page may end at a record deleted before the next page is read.
func TestRangeAfterPages(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	long := strings.Repeat("p/long", 200) // past what a key holds of an id
	kv := []string{"p/a", "1", "p/b", "2", "p/b\x00", "3", "p/c", "4", "q/x", "5", "p", "6", "o", "7"}
	for i := range 5 {
		kv = append(kv, fmt.Sprintf("%s%d", long[:len(long)-1], i), "L")
	}
	put(t, db, "r", kv...)
	var want []string
	if err := db.Range(ctx, "r", "p/", func(r table.Record) bool {
		want = append(want, r.ID)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(want) != 9 {
		t.Fatalf("Range(p/) gave %d records, want 9", len(want))
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		var page []string
		if err := db.RangeAfter(ctx, "r", "p/", after, func(r table.Record) bool {
			page = append(page, r.ID)
			return len(page) < 3
		}); err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1]
		if pages == 0 {
			// The page's last record goes before the next page is read.
			tx := db.Begin()
			if err := tx.Delete("r", after); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages gave %q,\nwant %q", got, want)
	}
	n := 0
	if err := db.RangeAfter(ctx, "r", "p/", "p/c", func(table.Record) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("after p/c: %d records, want the 5 long ones", n)
	}
}
