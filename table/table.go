package table

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/hlc"
)

// Sentinel errors of the table layer. Errors wrap one of them, and where
// the cause is an engine condition, the engine sentinel as well.
var (
	// ErrNotFound reports a record that does not exist or is deleted. It
	// also wraps engine.ErrNotFound.
	ErrNotFound = errors.New("table: record not found")
	// ErrInvalidName reports a table name or id the layer cannot store:
	// empty, too long for the engine's key limit (see MaxIDLen), or a
	// table name with a NUL byte.
	ErrInvalidName = errors.New("table: invalid table name or id")
	// ErrHistoryUnavailable reports a subscription that cannot deliver the
	// history it was asked for without loss: the log was truncated above
	// its start (wrapping engine.ErrLogTruncated), or rows were bulk-loaded
	// without history inside the range.
	ErrHistoryUnavailable = errors.New("table: history unavailable")
	// ErrTxDone reports use of a transaction after Submit or Commit.
	ErrTxDone = errors.New("table: transaction already submitted")
	// ErrBadCursor reports a cursor encoding that does not decode.
	ErrBadCursor = errors.New("table: bad cursor")
	// ErrClosed reports use of a closed DB; it wraps engine.ErrClosed.
	ErrClosed = fmt.Errorf("table: closed: %w", engine.ErrClosed)
)

// Version is a record's logical write time: a hybrid-logical-clock
// timestamp assigned to the writing transaction. Versions a DB assigns
// increase with the order of its commits, also across restarts; they are
// not log keys.
type Version uint64

// Time returns the wall time the version was issued at, to the
// millisecond.
func (v Version) Time() time.Time { return engine.LogKey(v).Time() }

// Op is the kind of a change-log entry.
type Op uint8

const (
	// OpPut sets a record's value.
	OpPut Op = iota + 1
	// OpDelete deletes a record, leaving a tombstone with its version.
	OpDelete
	// OpMessage is a message published under an id without changing the
	// record (the MQTT message log is made of these).
	OpMessage
	// OpReload marks rows of the table written by Tx.Load without
	// history; a subscription whose range holds one fails with
	// ErrHistoryUnavailable instead of silently missing them.
	OpReload
	// OpMark is a control entry: it occupies a log position and changes no
	// record; subscribers skip it.
	OpMark
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpMessage:
		return "message"
	case OpReload:
		return "reload"
	case OpMark:
		return "mark"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Record is the current state of one id in one table.
type Record struct {
	Table, ID string
	// Value is nil for a deleted record.
	Value []byte
	// Version is the version of the write that produced this state.
	Version Version
	// Deleted marks a tombstone.
	Deleted bool
}

// Options configures Open.
type Options struct {
	// Clock is the wall clock versions derive from; time.Now when nil.
	Clock func() time.Time
	// Logger receives the layer's logs; slog.Default() when nil.
	Logger *slog.Logger
	// TailWindow is the number of recent log entries kept decoded in memory
	// for live subscribers (default 4096), and TailBytes the payload bytes
	// they may hold (default 64 MiB); the window holds up to twice either
	// before it is trimmed. A subscriber further behind reads the engine's
	// log instead.
	TailWindow int
	TailBytes  int
}

// DB is a set of tables over one engine. It does not own the engine:
// Close stops the DB, the caller closes the engine. All methods are safe
// for concurrent use.
type DB struct {
	e   engine.Engine
	log *slog.Logger
	hlc *hlc.Clock
	// part and parts are the DB's place in a Partitions (0 and 1 when
	// it is not one of several).
	part, parts int

	// mu orders version assignment with engine submission, so a record's
	// versions increase in log order.
	mu     sync.Mutex
	closed bool
	// submitting is the Tx whose Submit holds mu, and ordered the
	// engine.Batch.Ordered of every Submit: made once, so that letting mu
	// go early costs a commit no allocation (see Tx.Submit).
	submitting *Tx
	ordered    func()
	hinted     time.Time // when a commit last carried the head hint
	reserved   Version   // versions below it are covered by a hint

	tail   *tail
	ctx    context.Context // ends when the DB closes
	cancel context.CancelFunc
	subs   sync.WaitGroup
}

// Open opens the tables stored in e. It finds the log head and seeds the
// version clock above the persisted version reservation, the highest
// version in the log's tail and the head's key, so versions stay monotonic
// across restarts and crashes even when the clock went back.
//
// An engine that holds one partition of several (see OpenPartitions) is
// refused with ErrPartitionMismatch.
func Open(ctx context.Context, e engine.Engine, opts Options) (*DB, error) {
	if e == nil {
		return nil, fmt.Errorf("table: open: nil engine: %w", engine.ErrInvalidOption)
	}
	if err := checkUnpartitioned(ctx, e); err != nil {
		return nil, err
	}
	return open(ctx, e, opts)
}

func open(ctx context.Context, e engine.Engine, opts Options) (*DB, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	window, maxBytes := opts.TailWindow, opts.TailBytes
	if window <= 0 {
		window = 4096
	}
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	var maxVer Version
	var hint engine.LogKey
	v, err := engine.Get(ctx, e, metaHead)
	switch {
	case err == nil:
		if maxVer, hint, err = decodeHead(v); err != nil {
			return nil, err
		}
	case !errors.Is(err, engine.ErrNotFound):
		return nil, fmt.Errorf("table: open: %w", err)
	}
	head, top, err := findHead(ctx, e, hint)
	if err != nil {
		return nil, fmt.Errorf("table: open: %w", err)
	}
	db := &DB{e: e, log: logger.With("layer", "table")}
	db.ordered = db.releaseOrdered
	db.hlc = hlc.New(opts.Clock, engine.LogKey(max(uint64(maxVer), uint64(top), uint64(head.key))))
	tctx, cancel := context.WithCancel(context.Background())
	db.ctx, db.cancel = tctx, cancel
	db.tail = newTail(db, head, window, maxBytes)
	go db.tail.run(tctx)
	return db, nil
}

// findHead returns the position of the last entry in the log and the
// highest version its entries carry, scanning forward from hint (a key
// known to be at or below the head).
func findHead(ctx context.Context, e engine.Engine, hint engine.LogKey) (head pos, top Version, err error) {
	head = pos{key: hint, idx: wholeKey}
	scan := func(from engine.LogKey) error {
		return e.ScanLog(ctx, from, false, func(en engine.Entry) bool {
			head = pos{key: en.Key, idx: en.Index}
			if en.Last() {
				head.idx = wholeKey
			}
			// Undecodable entries are reported to the readers that meet
			// them; here they carry no version.
			if le := decodeEntry(en); le.err == nil {
				top = max(top, le.version)
			}
			return true
		})
	}
	err = scan(hint)
	if errors.Is(err, engine.ErrLogTruncated) {
		st, serr := e.LogStats(ctx)
		if serr != nil {
			return pos{}, 0, serr
		}
		head = pos{key: st.Floor, idx: wholeKey}
		err = scan(st.Floor)
	}
	return head, top, err
}

// The head hint (metaHead) holds a version reservation and a log key. The
// reservation is a version no version issued before the next hint reaches,
// so Open seeds the version clock above it and no version is ever reissued,
// also for state writes that leave no log entry and after a restart with a
// clock that went back. The log key only shortens the scan Open does to
// find the log's end. A commit carries a new hint when its version reaches
// the reservation or a second passed since the last one, rather than
// always, because one key written by every commit makes concurrent commits
// contend on some engines.
const (
	hintEvery = time.Second
	// reserveSpan is how far above the current version a hint reserves:
	// about a second of hybrid-logical-clock time.
	reserveSpan = Version(1000) << 16
)

// hintLocked makes b carry a new hint when one is due for a commit at
// version v, or when forced; mu is held. A batch whose checks can fail
// must not carry it (the reservation would be lost with the batch): then
// the hint goes in a batch of its own, submitted just before.
func (db *DB) hintLocked(ctx context.Context, b *engine.Batch, v Version, force bool) {
	now := time.Now()
	if !force && v < db.reserved && now.Sub(db.hinted) < hintEvery {
		return
	}
	db.hinted, db.reserved = now, v+reserveSpan
	hint := encodeHead(db.reserved, db.tail.headPos().key)
	if len(b.Checks) == 0 {
		b.Put(metaHead, hint)
		return
	}
	// Ordered before b by the engine (submitted first, under mu); if it
	// fails, so does everything after it on this engine.
	if _, err := db.e.Submit(ctx, new(engine.Batch).Put(metaHead, hint)); err != nil {
		db.reserved = 0 // the next commit tries again
	}
}

// writeHint commits the head hint on its own.
func (db *DB) writeHint(ctx context.Context) error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	b := new(engine.Batch)
	db.hintLocked(ctx, b, Version(db.hlc.Next()), true)
	h, err := db.e.Submit(ctx, b)
	db.mu.Unlock()
	if err == nil {
		_, err = h.Wait(ctx)
	}
	return err
}

// Engine returns the engine the DB stores in.
func (db *DB) Engine() engine.Engine { return db.e }

// Close stops every subscription and follower of the DB and waits for
// them (a Follow callback that never returns holds it). It does not close
// the engine.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.closed = true
	// Best effort: a missing hint only makes the next Open scan further.
	b := new(engine.Batch)
	db.hintLocked(context.Background(), b, Version(db.hlc.Next()), true)
	h, err := db.e.Submit(context.Background(), b)
	db.mu.Unlock()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = h.Wait(ctx)
		cancel()
	}
	if err != nil && !errors.Is(err, engine.ErrClosed) {
		db.log.Warn("writing the head hint at close failed", "err", err)
	}
	db.cancel()
	<-db.tail.stopped
	db.subs.Wait()
	return nil
}

// Get returns the record table/id. A record never written, or deleted,
// yields an error wrapping ErrNotFound; for a deleted record the returned
// Record still carries the tombstone's version with Deleted set.
func (db *DB) Get(ctx context.Context, table, id string) (Record, error) {
	if err := validID(table, id); err != nil {
		return Record{}, err
	}
	b, err := engine.Get(ctx, db.e, dataKey(kindRecord, table, id))
	return recordOf(table, id, b, err)
}

// recordOf decodes the stored record table/id read as b, err.
func recordOf(table, id string, b []byte, err error) (Record, error) {
	if errors.Is(err, engine.ErrNotFound) {
		return Record{Table: table, ID: id}, &notFoundError{table: table, id: id, cause: err}
	}
	if err != nil {
		return Record{}, fmt.Errorf("table: get %s/%q: %w", table, id, err)
	}
	r, err := decodeRecord(table, id, b)
	if err != nil {
		return Record{}, err
	}
	if r.ID != id {
		// Another long id with the same leading bytes and hash: not
		// expected of SHA-256, and still never returned for this one.
		return Record{Table: table, ID: id}, fmt.Errorf("%w: %s/%.40q: %w", ErrNotFound, table, id, engine.ErrNotFound)
	}
	if r.Deleted {
		return r, fmt.Errorf("%w: %s/%q deleted at version %d: %w", ErrNotFound, table, id, r.Version, engine.ErrNotFound)
	}
	return r, nil
}

// notFoundError is the error of a Get of a record never written. A miss
// is an ordinary answer (a client's first session, a topic with no
// retained message), so its message is formatted only when read.
type notFoundError struct {
	table, id string
	cause     error
}

func (e *notFoundError) Error() string {
	return fmt.Sprintf("%v: %s/%q: %v", ErrNotFound, e.table, e.id, e.cause)
}

// Unwrap returns ErrNotFound and the engine's error, which wraps
// engine.ErrNotFound.
func (e *notFoundError) Unwrap() []error { return []error{ErrNotFound, e.cause} }

// Range calls fn for each live record of table whose id starts with
// idPrefix, in id byte order, from one consistent snapshot, until fn
// returns false. Deleted records are skipped. Ids longer than the engine's
// key room (see MaxIDLen) are the exception to the order: they sort by
// their first bytes, a few hundred, and then in no particular order.
func (db *DB) Range(ctx context.Context, table, idPrefix string, fn func(Record) bool) error {
	if err := validTable(table); err != nil {
		return err
	}
	lower, upper, exact := prefixBounds(table, idPrefix)
	return db.rangeKeys(ctx, table, idPrefix, lower, upper, exact, fn)
}

// RangeFrom is Range over the live records of table whose id is at or
// after from in byte order (the order rule for long ids is Range's), so a
// caller reading an index from the middle pays nothing for what sorts
// before from.
func (db *DB) RangeFrom(ctx context.Context, table, from string, fn func(Record) bool) error {
	if err := validTable(table); err != nil {
		return err
	}
	_, upper, _ := prefixBounds(table, "")
	return db.rangeKeys(ctx, table, "", dataKey(kindRecord, table, from), upper, true, fn)
}

// RangeAfter is Range over the records of table whose id starts with
// idPrefix and whose key sorts after after's, so a caller reads a prefix
// in pages: each page ends at a record it was given, the next starts past
// it, and no record is given twice or passed over, long ids included
// (their place in Range's order is their key's, which RangeAfter keeps).
// Each page reads its own snapshot. An empty after starts at the
// prefix's first record (no record has an empty id).
func (db *DB) RangeAfter(ctx context.Context, table, idPrefix, after string, fn func(Record) bool) error {
	if err := validTable(table); err != nil {
		return err
	}
	lower, upper, exact := prefixBounds(table, idPrefix)
	if after != "" {
		// The least key above after's: its key with a zero byte added.
		if past := append(dataKey(kindRecord, table, after), 0); bytes.Compare(past, lower) > 0 {
			lower = past
		}
		if bytes.Compare(lower, upper) >= 0 {
			return nil
		}
	}
	return db.rangeKeys(ctx, table, idPrefix, lower, upper, exact, fn)
}

// rangeKeys calls fn for the live records of table keyed in [lower,
// upper); with exact false it also checks each id for idPrefix.
func (db *DB) rangeKeys(ctx context.Context, table, idPrefix string, lower, upper []byte, exact bool, fn func(Record) bool) error {
	snap, err := db.e.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("table: range %s: %w", table, err)
	}
	defer snap.Close()
	return rangeIn(ctx, snap, table, idPrefix, lower, upper, exact, fn)
}

// rangeIn is rangeKeys over snap.
func rangeIn(ctx context.Context, snap engine.Snapshot, table, idPrefix string, lower, upper []byte, exact bool, fn func(Record) bool) error {
	it, err := snap.Iter(ctx, lower, upper)
	if err != nil {
		return fmt.Errorf("table: range %s: %w", table, err)
	}
	defer it.Close()
	skip := keyOverhead + len(table) - 1
	for n := 0; it.Next(); n++ {
		if n%256 == 255 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("table: range %s: %w", table, err)
			}
		}
		k := it.Key()
		if len(k) < skip+1 {
			return fmt.Errorf("table: range %s: key %x: %w", table, k, engine.ErrCorrupt)
		}
		r, err := decodeRecord(table, string(k[skip+1:]), it.Value())
		if err != nil {
			return err
		}
		if r.Deleted || (!exact && !strings.HasPrefix(r.ID, idPrefix)) {
			continue
		}
		if !fn(r) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("table: range %s: %w", table, err)
	}
	return nil
}

// Pump reads the log entries committed so far into the DB's live window
// and routes them to the members of its Fanouts, in the calling goroutine,
// unless another goroutine is doing so already (it then reads once more).
// A committer whose commit completed without waiting (SyncNone) calls it
// so the commit reaches live readers without first waking the DB's own
// follower goroutines; without the call they get there all the same. The
// caller must hold no lock that a Fanout's Route function takes.
func (db *DB) Pump() {
	db.tail.pump(db.ctx)
}

// Head returns the cursor at the current end of the log: a subscription
// started from it delivers exactly the entries committed after Head
// returned (and any whose commit was not yet visible). A durable consumer
// that subscribes for the first time persists Head before acknowledging
// the subscription.
func (db *DB) Head(ctx context.Context) (Cursor, error) {
	from := db.tail.headPos()
	p, _, err := findHead(ctx, db.e, from.key)
	if err != nil {
		return Cursor{}, fmt.Errorf("table: head: %w", err)
	}
	if p.less(from) {
		p = from
	}
	return p.cursor(), nil
}

// LogStats describes the retained change log.
func (db *DB) LogStats(ctx context.Context) (engine.LogStats, error) {
	st, err := db.e.LogStats(ctx)
	if err != nil {
		return st, fmt.Errorf("table: log stats: %w", err)
	}
	return st, nil
}

// TruncateBelow removes the log entries that c covers entirely, keeping
// everything a resume from c still needs. Call it with the lowest
// checkpoint of all durable consumers; a consumer whose checkpoint is
// below the truncation then fails with ErrHistoryUnavailable instead of
// missing entries.
func (db *DB) TruncateBelow(ctx context.Context, c Cursor) error {
	// The versions in the removed entries must stay above the clock's
	// floor after a restart: record the highest one first.
	if err := db.writeHint(ctx); err != nil {
		return fmt.Errorf("table: truncate below %s: %w", c, err)
	}
	below := c.Key
	if c.Next == 0 {
		below++
	}
	if err := db.e.Truncate(ctx, below); err != nil {
		return fmt.Errorf("table: truncate below %s: %w", c, err)
	}
	db.tail.trim(below)
	return nil
}
