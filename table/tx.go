package table

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

// Tx is one atomic commit across any number of tables: its preconditions
// all hold and all its writes and log entries apply, or nothing does. A Tx
// is built by one goroutine and used once.
//
// Each write appends one change-log entry, in call order, so the i-th
// entry of the commit's engine.Result.Keys is the log key of the i-th
// Put, Delete, Message or Mark (a Load adds one reload marker per table at
// the table's first Load instead). Every write of one Tx carries the same
// Version.
//
// A write or a condition that is invalid (a bad table or id) returns its
// error and also sticks to the Tx: Submit and Commit return the first one
// and apply nothing, so a caller that builds a Tx in several calls may
// check once, at the commit.
//
// Each Put or Delete takes three engine entries (record, version key, log
// entry), so a Tx holds at most about engine.MaxBatchEntries/3 of them;
// Submit reports a larger one with engine.ErrBatchTooLarge.
type Tx struct {
	db      *DB
	writes  []write
	small   [4]write // writes' first backing array: most Txs write a few
	checks  []engine.Check
	loaded  map[string]bool
	err     error
	done    bool
	deferd  bool
	version Version
}

type write struct {
	op        Op
	table, id string
	value     []byte
}

// Begin starts a transaction.
func (db *DB) Begin() *Tx {
	tx := &Tx{db: db}
	tx.writes = tx.small[:0]
	return tx
}

func (tx *Tx) add(w write, check error) error {
	if tx.done {
		return ErrTxDone
	}
	if check != nil {
		if tx.err == nil {
			tx.err = check
		}
		return check
	}
	tx.writes = append(tx.writes, w)
	return nil
}

// Put sets table/id to value. The Tx keeps value until the commit
// completes; the caller must not modify it before.
func (tx *Tx) Put(table, id string, value []byte) error {
	return tx.add(write{op: OpPut, table: table, id: id, value: value}, validID(table, id))
}

// Delete deletes table/id, leaving a tombstone; deleting an absent record
// still records the deletion.
func (tx *Tx) Delete(table, id string) error {
	return tx.add(write{op: OpDelete, table: table, id: id}, validID(table, id))
}

// Message appends a message under table/id to the change log without
// changing the record: subscribers receive it like a write.
func (tx *Tx) Message(table, id string, value []byte) error {
	return tx.add(write{op: OpMessage, table: table, id: id, value: value}, validID(table, id))
}

// Load sets table/id to value without a change-log entry: a bulk
// back-fill. The Tx appends one OpReload marker per table instead, so a
// subscription that replays across it fails with ErrHistoryUnavailable
// rather than silently missing the loaded rows.
func (tx *Tx) Load(table, id string, value []byte) error {
	err := tx.add(write{op: OpReload, table: table, id: id, value: value}, validID(table, id))
	if err == nil && !tx.loaded[table] {
		if tx.loaded == nil {
			tx.loaded = map[string]bool{}
		}
		tx.loaded[table] = true
		tx.writes[len(tx.writes)-1].op = opLoadFirst
	}
	return err
}

// opLoadFirst is a Load that also carries its table's reload marker.
const opLoadFirst Op = 0xff

// Internal ops of state writes (see PutState).
const (
	opPutState             Op = 0xfe
	opDeleteState          Op = 0xfd
	opPutStateUnchecked    Op = 0xfc
	opDeleteStateUnchecked Op = 0xfb
)

// PutState sets table/id to value without a change-log entry. It is for
// state no subscriber follows (a broker's sessions, staging slots): it
// keeps the log to the changes people subscribe to and costs one engine
// entry less. Get, Range and the Expect preconditions see it like a Put.
func (tx *Tx) PutState(table, id string, value []byte) error {
	return tx.add(write{op: opPutState, table: table, id: id, value: value}, validID(table, id))
}

// DeleteState removes table/id entirely: no tombstone and no change-log
// entry, so state that is written and deleted at a high rate (one slot per
// in-flight message) leaves nothing behind. Only for tables written with
// PutState.
func (tx *Tx) DeleteState(table, id string) error {
	return tx.add(write{op: opDeleteState, table: table, id: id}, validID(table, id))
}

// PutStateUnchecked is PutState for state that no transaction ever checks:
// it writes the record alone, one engine entry where PutState writes two,
// so ExpectVersion and ExpectAbsent see table/id as absent. Get and Range
// see it like a Put. For state written once or twice per message (a
// broker's outbound delivery records), where that entry is a real share
// of the store's work.
func (tx *Tx) PutStateUnchecked(table, id string, value []byte) error {
	return tx.add(write{op: opPutStateUnchecked, table: table, id: id, value: value}, validID(table, id))
}

// DeleteStateUnchecked removes what PutStateUnchecked wrote, in one engine
// entry.
func (tx *Tx) DeleteStateUnchecked(table, id string) error {
	return tx.add(write{op: opDeleteStateUnchecked, table: table, id: id}, validID(table, id))
}

// Mark appends a control entry to table's log: it occupies a log position
// and changes no record. Subscribers of table skip it, and it still counts
// toward their cursor.
func (tx *Tx) Mark(table string, payload []byte) error {
	return tx.add(write{op: OpMark, table: table, value: payload}, validTable(table))
}

// ExpectVersion makes the commit conditional on table/id being a live
// record at version v; otherwise the commit fails with an error wrapping
// engine.ErrConflict and applies nothing.
func (tx *Tx) ExpectVersion(table, id string, v Version) error {
	if tx.done {
		return ErrTxDone
	}
	if err := validID(table, id); err != nil {
		return tx.add(write{}, err)
	}
	tx.checks = append(tx.checks, engine.Check{Key: dataKey(kindVersion, table, id), Value: encodeVersion(v)})
	return nil
}

// ExpectAbsent makes the commit conditional on table/id being absent or
// deleted; otherwise it fails with an error wrapping engine.ErrConflict.
func (tx *Tx) ExpectAbsent(table, id string) error {
	if tx.done {
		return ErrTxDone
	}
	if err := validID(table, id); err != nil {
		return tx.add(write{}, err)
	}
	tx.checks = append(tx.checks, engine.Check{Key: dataKey(kindVersion, table, id), Absent: true})
	return nil
}

// Defer marks the Tx as one nobody waits on at once (see engine.Batch's
// Defer): its durable completion may wait a little to share a later
// commit's sync. For state behind a pipeline that keeps going meanwhile.
func (tx *Tx) Defer() { tx.deferd = true }

// Version is the version the Tx's writes carry; zero before Submit.
func (tx *Tx) Version() Version { return tx.version }

// Submit starts the commit and returns at once; the handle completes when
// the commit is durable, with the log keys of its entries (see Tx) or the
// error (engine.ErrConflict when a precondition failed). Commits submitted
// one after another, from any goroutines, get increasing versions and log
// keys in submission order. An error from Submit itself means nothing was
// applied.
func (tx *Tx) Submit(ctx context.Context) (*engine.Handle, error) {
	if tx.done {
		return nil, ErrTxDone
	}
	tx.done = true
	if tx.err != nil {
		return nil, tx.err
	}
	if len(tx.writes) == 0 && len(tx.checks) == 0 {
		return nil, fmt.Errorf("table: submit: %w", engine.ErrEmptyBatch)
	}
	// The batch is encoded before the lock, with the version left blank:
	// every commit of the DB passes through the lock, so it holds only
	// what must happen in version order.
	// Each write takes at most two ops and one log entry; the head hint
	// may take one more op.
	b := &engine.Batch{Checks: tx.checks, Defer: tx.deferd,
		Ops: make([]engine.Op, 0, 2*len(tx.writes)+1), Log: make([][]byte, 0, len(tx.writes))}
	stamps := make([][]byte, 0, 2*len(tx.writes))
	record := func(w write, deleted bool, value []byte) []byte {
		r := encodeRecord(w.table, w.id, 0, deleted, value)
		stamps = append(stamps, r[recordVersionAt:recordVersionAt+8])
		return r
	}
	version := func() []byte {
		r := encodeVersion(0)
		stamps = append(stamps, r)
		return r
	}
	entry := func(op Op, table, id string, value []byte) []byte {
		r, at := encodeEntryAt(op, table, id, 0, value)
		stamps = append(stamps, r[at:at+8])
		return r
	}
	for _, w := range tx.writes {
		switch w.op {
		case OpPut, OpReload, opLoadFirst:
			b.Put(dataKey(kindRecord, w.table, w.id), record(w, false, w.value))
			b.Put(dataKey(kindVersion, w.table, w.id), version())
		case OpDelete:
			b.Put(dataKey(kindRecord, w.table, w.id), record(w, true, nil))
			b.Delete(dataKey(kindVersion, w.table, w.id))
		case opPutState:
			b.Put(dataKey(kindRecord, w.table, w.id), record(w, false, w.value))
			b.Put(dataKey(kindVersion, w.table, w.id), version())
		case opDeleteState:
			b.Delete(dataKey(kindRecord, w.table, w.id))
			b.Delete(dataKey(kindVersion, w.table, w.id))
		case opPutStateUnchecked:
			b.Put(dataKey(kindRecord, w.table, w.id), record(w, false, w.value))
		case opDeleteStateUnchecked:
			b.Delete(dataKey(kindRecord, w.table, w.id))
		}
		switch w.op {
		case OpPut, OpDelete, OpMessage, OpMark:
			b.Append(entry(w.op, w.table, w.id, w.value))
		case opLoadFirst:
			b.Append(entry(OpReload, w.table, "", nil))
		}
	}
	db := tx.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, ErrClosed
	}
	v := Version(db.hlc.Next())
	for _, st := range stamps {
		binary.BigEndian.PutUint64(st, uint64(v))
	}
	// The head hint keeps versions monotonic across restarts and lets
	// Open find the log's end without reading the whole log.
	db.hintLocked(ctx, b, v, false)
	h, err := db.e.Submit(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("table: submit: %w", err)
	}
	tx.version = v
	return h, nil
}

// Commit submits the Tx and waits until it is durable.
func (tx *Tx) Commit(ctx context.Context) error {
	h, err := tx.Submit(ctx)
	if err != nil {
		return err
	}
	if _, err := h.Wait(ctx); err != nil {
		return fmt.Errorf("table: commit: %w", err)
	}
	return nil
}
