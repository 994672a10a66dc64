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
// The values a Tx is given (of writes and of ExpectState) are read by
// Submit, which copies them: they must not change before it, and are the
// caller's to reuse once it returned.
//
// Each Put or Delete takes three engine entries (record, version key, log
// entry), so a Tx holds at most about engine.MaxBatchEntries/3 of them;
// Submit reports a larger one with engine.ErrBatchTooLarge.
type Tx struct {
	db      *DB
	writes  []write
	small   [4]write // writes' first backing array: most Txs write a few
	checks  []check  // encoded by Submit, into the batch's arena
	loaded  map[string]bool
	err     error
	done    bool
	deferd  bool
	version Version
	// released says the engine ordered the commit and Submit let the
	// DB's lock go then (see DB.releaseOrdered).
	released bool

	// The engine batch Submit builds, with first backing arrays for its
	// ops and log entries: the Tx is allocated anyway and lives until the
	// commit completes, as the engine holds the batch that long.
	batch   engine.Batch
	ops     [5]engine.Op
	logs    [2][]byte
	checks1 [1]check        // checks' first backing array: most check one key
	echecks [1]engine.Check // the batch's checks' first backing array
}

// check is a precondition as the Tx was given it; Submit encodes it
// (engine.Check) into the arena that holds the writes' keys and records,
// so a check costs no allocation of its own.
type check struct {
	kind      checkKind
	table, id string
	version   Version
	value     []byte // checkState: the record's value
}

type checkKind uint8

const (
	checkVersion   checkKind = iota // ExpectVersion: the version entry holds version
	checkNoVersion                  // ExpectAbsent: no version entry
	checkState                      // ExpectState: the record holds value at version
	checkNoState                    // ExpectNoState: no record
)

// len is the arena bytes c's engine check takes.
func (c *check) len() int {
	n := dataKeyLen(c.table, c.id)
	switch c.kind {
	case checkVersion:
		n += 8
	case checkState:
		n += recordLen(c.table, c.id, c.value)
	}
	return n
}

// encode carves c's engine check from the arena a.
func (c *check) encode(a []byte) ([]byte, engine.Check) {
	var ec engine.Check
	switch c.kind {
	case checkVersion:
		a, ec.Key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindVersion, c.table, c.id) })
		a, ec.Value = carve(a, func(a []byte) []byte { return binary.BigEndian.AppendUint64(a, uint64(c.version)) })
	case checkNoVersion:
		a, ec.Key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindVersion, c.table, c.id) })
		ec.Absent = true
	case checkState:
		a, ec.Key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindRecord, c.table, c.id) })
		a, ec.Value = carve(a, func(a []byte) []byte { return appendRecord(a, c.table, c.id, c.version, false, c.value) })
	case checkNoState:
		a, ec.Key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindRecord, c.table, c.id) })
		ec.Absent = true
	}
	return a, ec
}

type write struct {
	op        Op
	table, id string
	value     []byte
	from      ValueAppender // instead of value, for opPutStateUnchecked
}

// ValueAppender produces a record's value when its transaction is
// submitted, straight into the memory of the commit, so that its caller
// builds no copy of its own to hand over. The Tx calls ValueSize and then
// AppendValue, once each, on the goroutine that calls Submit: whatever
// they read must not change between the Put and the Submit. AppendValue
// appends at most ValueSize bytes.
type ValueAppender interface {
	ValueSize() int
	AppendValue(b []byte) []byte
}

// Begin starts a transaction.
func (db *DB) Begin() *Tx {
	tx := &Tx{db: db}
	tx.writes = tx.small[:0]
	tx.checks = tx.checks1[:0]
	return tx
}

// BeginSized starts a transaction expected to hold about writes writes
// and checks checks: its arrays are allocated once, at those sizes, rather
// than grown as they fill. The sizes are a hint; a Tx takes any number.
func (db *DB) BeginSized(writes, checks int) *Tx {
	tx := db.Begin()
	if writes > len(tx.small) {
		tx.writes = make([]write, 0, writes)
	}
	if checks > len(tx.checks1) {
		tx.checks = make([]check, 0, checks)
	}
	return tx
}

// Size reports how many writes and checks tx holds: with BeginSized, a
// caller that commits transactions of a like size sizes the next one.
func (tx *Tx) Size() (writes, checks int) { return len(tx.writes), len(tx.checks) }

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

// PutStateUncheckedFrom is PutStateUnchecked with the value v appends
// at Submit (see ValueAppender).
func (tx *Tx) PutStateUncheckedFrom(table, id string, v ValueAppender) error {
	return tx.add(write{op: opPutStateUnchecked, table: table, id: id, from: v}, validID(table, id))
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

// checkable returns nil when a precondition on table/id may be added, or
// the error to return: ErrTxDone, or an invalid id's error, which also
// sticks to the Tx like an invalid write's.
func (tx *Tx) checkable(table, id string) error {
	if tx.done {
		return ErrTxDone
	}
	if err := validID(table, id); err != nil {
		return tx.add(write{}, err)
	}
	return nil
}

// ExpectVersion makes the commit conditional on table/id being a live
// record at version v; otherwise the commit fails with an error wrapping
// engine.ErrConflict and applies nothing.
func (tx *Tx) ExpectVersion(table, id string, v Version) error {
	if err := tx.checkable(table, id); err != nil {
		return err
	}
	tx.checks = append(tx.checks, check{kind: checkVersion, table: table, id: id, version: v})
	return nil
}

// ExpectAbsent makes the commit conditional on table/id being absent or
// deleted; otherwise it fails with an error wrapping engine.ErrConflict.
func (tx *Tx) ExpectAbsent(table, id string) error { return tx.expectNoKey(checkNoVersion, table, id) }

// expectNoKey makes the commit conditional on no key of kind for
// table/id.
func (tx *Tx) expectNoKey(kind checkKind, table, id string) error {
	if err := tx.checkable(table, id); err != nil {
		return err
	}
	tx.checks = append(tx.checks, check{kind: kind, table: table, id: id})
	return nil
}

// ExpectState makes the commit conditional on table/id holding exactly
// value at version v, as a PutState or PutStateUnchecked of a commit at
// version v wrote it; otherwise the commit fails with an error wrapping
// engine.ErrConflict. It checks the record itself, so it serves state
// written without the version entry that ExpectVersion reads. Like a
// write's value, value is read at Submit (see Tx).
func (tx *Tx) ExpectState(table, id string, v Version, value []byte) error {
	if err := tx.checkable(table, id); err != nil {
		return err
	}
	tx.checks = append(tx.checks, check{kind: checkState, table: table, id: id, version: v, value: value})
	return nil
}

// ExpectNoState makes the commit conditional on no state record at
// table/id (none written, or removed by DeleteState or
// DeleteStateUnchecked); otherwise it fails with an error wrapping
// engine.ErrConflict. Unlike ExpectAbsent it sees records written by
// PutStateUnchecked. Only for tables written with the state writes: a
// Delete leaves a tombstone record, which this counts as present.
func (tx *Tx) ExpectNoState(table, id string) error { return tx.expectNoKey(checkNoState, table, id) }

// Defer marks the Tx as one nobody waits on at once (see engine.Batch's
// Defer): its durable completion may wait a little to share a later
// commit's sync. For state behind a pipeline that keeps going meanwhile.
func (tx *Tx) Defer() { tx.deferd = true }

// Version is the version the Tx's writes carry; zero before Submit.
func (tx *Tx) Version() Version { return tx.version }

// Logged reports whether the submitted Tx appended entries to the log:
// whether live readers have anything to read from its commit.
func (tx *Tx) Logged() bool { return tx.done && len(tx.batch.Log) > 0 }

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
	// what must happen in version order. Keys, records and version values
	// share one allocation, the log entries another: the tail keeps
	// entries for live readers and must not keep the rest with them, and
	// a commit's entries leave the tail together. Each write takes at most
	// two ops, three version stamps and one log entry; the head hint may
	// take one more op.
	b := &tx.batch
	b.Defer = tx.deferd
	if n := 2*len(tx.writes) + 1; n <= len(tx.ops) {
		b.Ops = tx.ops[:0]
	} else {
		b.Ops = make([]engine.Op, 0, n)
	}
	logLen, logs := tx.logLen()
	b.Log = tx.logs[:0]
	if logs > len(tx.logs) {
		b.Log = make([][]byte, 0, logs)
	}
	var la []byte
	if logLen > 0 {
		la = make([]byte, 0, logLen)
	}
	var stampsBuf [8][]byte
	stamps := stampsBuf[:0]
	if n := 3 * len(tx.writes); n > len(stampsBuf) {
		stamps = make([][]byte, 0, n)
	}
	a := make([]byte, 0, tx.arenaLen())
	// The checks first: what they compare is the caller's until Submit
	// (ExpectState's value), and is copied now.
	b.Checks = nil
	if len(tx.checks) > 0 {
		b.Checks = tx.echecks[:0]
		if len(tx.checks) > len(tx.echecks) {
			b.Checks = make([]engine.Check, 0, len(tx.checks))
		}
		for i := range tx.checks {
			var ec engine.Check
			a, ec = tx.checks[i].encode(a)
			b.Checks = append(b.Checks, ec)
		}
	}
	for _, w := range tx.writes {
		var key, val []byte
		switch w.op {
		case OpPut, OpReload, opLoadFirst, opPutState, OpDelete, opPutStateUnchecked:
			a, key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindRecord, w.table, w.id) })
			deleted := w.op == OpDelete
			a, val = carve(a, func(a []byte) []byte {
				a = appendRecord(a, w.table, w.id, 0, deleted, w.value)
				if w.from != nil {
					a = w.from.AppendValue(a)
				}
				return a
			})
			stamps = append(stamps, val[recordVersionAt:recordVersionAt+8])
			b.Put(key, val)
		case opDeleteState, opDeleteStateUnchecked:
			a, key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindRecord, w.table, w.id) })
			b.Delete(key)
		}
		switch w.op {
		case OpPut, OpReload, opLoadFirst, opPutState:
			a, key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindVersion, w.table, w.id) })
			a, val = carve(a, func(a []byte) []byte { return binary.BigEndian.AppendUint64(a, 0) })
			stamps = append(stamps, val)
			b.Put(key, val)
		case OpDelete, opDeleteState:
			a, key = carve(a, func(a []byte) []byte { return appendDataKey(a, kindVersion, w.table, w.id) })
			b.Delete(key)
		}
		var r []byte
		var at int
		switch w.op {
		case OpPut, OpDelete, OpMessage, OpMark:
			la, r, at = carveEntry(la, w.op, w.table, w.id, w.value)
		case opLoadFirst:
			la, r, at = carveEntry(la, OpReload, w.table, "", nil)
		}
		if r != nil {
			stamps = append(stamps, r[at:at+8])
			b.Append(r)
		}
	}
	db := tx.db
	db.mu.Lock()
	// Held until the engine has ordered the commit: versions follow log
	// order. An engine that then waits for the write says when
	// (Batch.Ordered, on this goroutine), and the next commit need not
	// wait for that write: it shares it.
	db.submitting = tx
	b.Ordered = db.ordered
	defer func() {
		if !tx.released {
			db.submitting = nil
			db.mu.Unlock()
		}
	}()
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

// logLen bounds the bytes of the log entries of the Tx's writes, which
// number logs.
func (tx *Tx) logLen() (n, logs int) {
	for _, w := range tx.writes {
		switch w.op {
		case OpPut, OpDelete, OpMessage, OpMark:
			n += entryLen(w.table, w.id, w.value)
		case opLoadFirst:
			n += entryLen(w.table, "", nil)
		default:
			continue
		}
		logs++
	}
	return n, logs
}

// carveEntry appends a log entry with a blank version to a, as carve
// does, and returns a, the entry and the offset of its version in it.
func carveEntry(a []byte, op Op, table, id string, value []byte) ([]byte, []byte, int) {
	start := len(a)
	a, at := appendEntryAt(a, op, table, id, 0, value)
	return a, a[start:len(a):len(a)], at - start
}

// arenaLen bounds the bytes of the keys, records and version values of
// the Tx's writes.
func (tx *Tx) arenaLen() int {
	n := 0
	for i := range tx.checks {
		n += tx.checks[i].len()
	}
	for _, w := range tx.writes {
		switch w.op {
		case OpPut, OpReload, opLoadFirst, opPutState:
			n += 2*dataKeyLen(w.table, w.id) + recordLen(w.table, w.id, w.value) + 8
		case OpDelete:
			n += 2*dataKeyLen(w.table, w.id) + recordLen(w.table, w.id, nil)
		case opPutStateUnchecked:
			n += dataKeyLen(w.table, w.id) + recordLen(w.table, w.id, w.value)
			if w.from != nil {
				n += w.from.ValueSize()
			}
		case opDeleteState:
			n += 2 * dataKeyLen(w.table, w.id)
		case opDeleteStateUnchecked:
			n += dataKeyLen(w.table, w.id)
		}
	}
	return n
}

// carve appends what fill appends to a and returns a and the appended
// bytes, capped so that a later append never writes over them.
func carve(a []byte, fill func([]byte) []byte) ([]byte, []byte) {
	start := len(a)
	a = fill(a)
	return a, a[start:len(a):len(a)]
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

// releaseOrdered is every Submit's engine.Batch.Ordered: the engine calls
// it on the submitting goroutine while that Submit holds mu, so
// submitting is that Submit's Tx, which learns it need not unlock.
func (db *DB) releaseOrdered() {
	tx := db.submitting
	if tx == nil {
		return // not inside a Submit; an engine calls it once per commit
	}
	db.submitting, tx.released = nil, true
	db.mu.Unlock()
}
