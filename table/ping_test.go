package table_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/table"
)

func TestPing(t *testing.T) {
	db, _ := openDB(t)
	ctx := context.Background()
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("ping an open DB: %v", err)
	}
	db.Close()
	if err := db.Ping(ctx); !errors.Is(err, table.ErrClosed) {
		t.Fatalf("ping a closed DB: %v, want ErrClosed", err)
	}
}
