package table

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

// Ping checks that the DB is open, its engine takes commits (engine.Health:
// a full disk fails it with an error wrapping engine.ErrWriteFailed) and
// answers a point read, one key whatever the size of the tables and the
// log: a health check for every probe, where LogStats may scan the log.
func (db *DB) Ping(ctx context.Context) error {
	db.mu.Lock()
	closed := db.closed
	db.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := engine.Health(db.e); err != nil {
		return fmt.Errorf("table: ping: %w", err)
	}
	if _, err := engine.Get(ctx, db.e, metaHead); err != nil && !errors.Is(err, engine.ErrNotFound) {
		return fmt.Errorf("table: ping: %w", err)
	}
	return nil
}
