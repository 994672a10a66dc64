// Package tabletest opens real tables for the tests of the packages built
// on them: a table.DB on Pebble, the default engine, in the test's own
// temporary directory, closed when the test ends.
package tabletest

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble" // registers "pebble"
	"github.com/tidemark-io/tidemark/table"
)

// Open returns a table.DB on a new Pebble store in t's temporary
// directory; the test fails if it cannot open, and the DB and its engine
// are closed when the test ends.
func Open(t testing.TB) *table.DB {
	t.Helper()
	ctx := context.Background()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		e.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = db.Close()
		_ = e.Close()
	})
	return db
}
