package table

import (
	"context"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

// View is a read-only, consistent view of every table: it sees each
// transaction that committed before it was taken and none after. It is
// valid only inside the function passed to DB.View.
type View struct {
	ctx  context.Context
	snap engine.Snapshot
	done bool
}

// Get returns the record table/id as the view sees it, with the errors of
// DB.Get (ErrNotFound for a record never written, or deleted).
func (v *View) Get(table, id string) (Record, error) {
	if v.done {
		return Record{}, fmt.Errorf("table: view used after View returned: %w", ErrClosed)
	}
	if err := validID(table, id); err != nil {
		return Record{}, err
	}
	b, err := v.snap.Get(v.ctx, dataKey(kindRecord, table, id))
	return recordOf(table, id, b, err)
}

// Range calls fn for each live record of table whose id starts with
// idPrefix, as the view sees them, in the order of DB.Range, until fn
// returns false.
func (v *View) Range(table, idPrefix string, fn func(Record) bool) error {
	if v.done {
		return fmt.Errorf("table: view used after View returned: %w", ErrClosed)
	}
	if err := validTable(table); err != nil {
		return err
	}
	lower, upper, exact := prefixBounds(table, idPrefix)
	return rangeIn(v.ctx, v.snap, table, idPrefix, lower, upper, exact, fn)
}

// View calls fn with a consistent read-only view of every table and
// returns fn's error. The view ends when fn returns: reads through it
// after that fail with ErrClosed.
func (db *DB) View(ctx context.Context, fn func(*View) error) error {
	snap, err := db.e.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("table: view: %w", err)
	}
	defer snap.Close()
	v := &View{ctx: ctx, snap: snap}
	defer func() { v.done = true }()
	return fn(v)
}

// Update runs fn in a new transaction and commits it, durably, when fn
// returns nil: all of fn's writes apply together or none does. When fn
// returns an error nothing is written and Update returns that error; a
// failed precondition (Tx.ExpectVersion, Tx.ExpectAbsent) makes Update
// return an error wrapping engine.ErrConflict, with nothing written
// either. Update does not retry: a caller that wants to calls it again.
func (db *DB) Update(ctx context.Context, fn func(*Tx) error) error {
	tx := db.Begin()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
