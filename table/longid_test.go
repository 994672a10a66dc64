package table_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Ids longer than the engine's key room (an MQTT topic may be 65535
// bytes) are stored, read, ranged over, checked and deleted like others,
// also when two of them share their first thousands of bytes.
func TestLongIDs(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	long := strings.Repeat("level/", 500)
	a, b, short := long+"a", long+"b", "s"
	tx := db.Begin()
	for _, id := range []string{a, b, short} {
		_ = tx.ExpectAbsent("t", id)
		_ = tx.Put("t", id, []byte("v-"+id[len(id)-1:]))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("put long ids: %v", err)
	}
	for _, id := range []string{a, b} {
		r, err := db.Get(ctx, "t", id)
		if err != nil || r.ID != id || string(r.Value) != "v-"+id[len(id)-1:] {
			t.Fatalf("get a long id: %q, %v", r.Value, err)
		}
	}
	if _, err := db.Get(ctx, "t", long+"c"); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("get an absent long id: %v, want ErrNotFound", err)
	}
	rangeIDs := func(prefix string) []string {
		var ids []string
		if err := db.Range(ctx, "t", prefix, func(r table.Record) bool { ids = append(ids, r.ID); return true }); err != nil {
			t.Fatalf("range %.20q: %v", prefix, err)
		}
		return ids
	}
	if got := rangeIDs(long); len(got) != 2 || !(got[0] == a && got[1] == b || got[0] == b && got[1] == a) {
		t.Fatalf("range over the long prefix: %d ids", len(got))
	}
	if got := rangeIDs(a); len(got) != 1 || got[0] != a {
		t.Fatalf("range over one whole long id: %d ids", len(got))
	}
	if got := rangeIDs(""); len(got) != 3 {
		t.Fatalf("range over the table: %d ids, want 3", len(got))
	}
	tx = db.Begin()
	_ = tx.ExpectAbsent("t", a)
	_ = tx.Put("t", a, []byte("again"))
	if err := tx.Commit(ctx); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("ExpectAbsent on a present long id: %v, want ErrConflict", err)
	}
	tx = db.Begin()
	_ = tx.Delete("t", a)
	_ = tx.Message("m", long+long, []byte("message under a long id"))
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("delete a long id: %v", err)
	}
	if _, err := db.Get(ctx, "t", a); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("get a deleted long id: %v", err)
	}
	if r, err := db.Get(ctx, "t", b); err != nil || r.ID != b {
		t.Fatalf("the other long id after the delete: %v", err)
	}
	tx = db.Begin()
	if err := tx.Put("t", strings.Repeat("x", table.MaxID+1), nil); !errors.Is(err, engine.ErrKeyTooLarge) {
		t.Fatalf("id over MaxID: %v, want ErrKeyTooLarge", err)
	}
}
