package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/table"
)

// openTestDB opens a table store on a fresh Pebble engine (no fsyncs),
// closed when the test ends: for the package's internal tests, which
// write the store directly around a broker.
func openTestDB(t *testing.T, ctx context.Context) *table.DB {
	t.Helper()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// hookedTestDB skips a test that needs Hooks in a build without them, and
// otherwise opens its store (openTestDB) under a context that ends with
// the test, after a minute at most.
func hookedTestDB(t *testing.T) (context.Context, *table.DB) {
	t.Helper()
	if !HooksEnabled {
		t.Skip("needs the fault hooks: go test -tags faults")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, openTestDB(t, ctx)
}

// serveTestBroker starts a broker on db with opts, listening on a free
// loopback port, and returns its address and the broker; it is closed
// when the test ends, before the store.
func serveTestBroker(t *testing.T, db *table.DB, opts Options) (string, *Broker) {
	t.Helper()
	b, err := New(table.OnePartition(db), opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = b.Serve(ln) }()
	t.Cleanup(func() { _ = b.Close(); <-served })
	return ln.Addr().String(), b
}
