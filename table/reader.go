package table

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/tidemark-io/tidemark/engine"
)

// SubscribeOptions selects what a subscription or follower reads and from
// where.
type SubscribeOptions struct {
	// Table is the table to read; empty reads every table.
	Table string
	// ID restricts the scope to one record; Prefix to the ids that start
	// with it. At most one of them may be set, and only with Table.
	ID, Prefix string
	// Start is where to resume: entries Start covers are not delivered
	// (resume is exclusive). The zero Cursor starts at the beginning of
	// the retained log; db.Head() starts at the present.
	Start Cursor
	// Inclusive also delivers the entries carrying Start.Key.
	Inclusive bool
	// IncludeSuperseded delivers every version in log order. When false
	// (the "latest state" mode), a put or delete is delivered only if it
	// is still the record's current version; skipped entries still count
	// as handled. Durable consumers that must see every write (MQTT QoS >=
	// 1 sessions) set it.
	IncludeSuperseded bool
	// Composite lets the cursor and checkpoint stop inside a log key
	// (Cursor.Next > 0), so a resume re-sends nothing already handled even
	// when a transaction was cut short on an engine whose commits share
	// one key. When false the cursor moves only to complete keys, and a
	// resume re-sends the handled part of the last partial transaction.
	Composite bool
	// YieldEvery is how many entries the reader reads between yields
	// (default 100). At a yield it lets other goroutines run, re-opens its
	// engine scan (so truncation and new commits are seen) and stops if
	// the subscription was closed.
	YieldEvery int
	// Buffer is the number of delivered but unreceived events a
	// Subscription holds before the reader waits for the consumer
	// (default 100). Follow ignores it.
	Buffer int
	// Filter, when set, drops events it returns false for; dropped events
	// count as handled.
	Filter func(Event) bool
	// Hooks observe the reader; they exist for fault injection and
	// instrumentation and run on the reader's goroutine.
	Hooks Hooks
}

// Hooks are called by a reader at its stop points, on the reader's
// goroutine. A hook that returns false stops the reader right there, as a
// Close landing at that point would: the cursor stays where the cursor
// rule left it. A nil hook continues.
type Hooks struct {
	// Yield is called at each yield with the number of entries read so
	// far.
	Yield func(read uint64) bool
	// Blocked is called when a delivery must wait because the consumer's
	// buffer is full, before the reader waits.
	Blocked func() bool
	// Live is called when the reader has read every entry of the log and
	// is about to wait for new ones: at the end of the replay, and again
	// whenever it fell behind the tail's window and caught up.
	Live func() bool
}

// Event is one delivered change-log entry.
type Event struct {
	// Table and ID name the record or message. ID shares its memory with
	// the log entry (and Value): a caller keeping many IDs long after
	// their events, as map keys, say, keeps strings.Clone(ID) instead.
	Table, ID string
	Op        Op
	// Value is the written value or message payload; it is shared with
	// other subscribers and must not be modified.
	Value   []byte
	Version Version
	// Key, Index and Count place the entry in the log: entry Index of the
	// Count entries that carry Key.
	Key          engine.LogKey
	Index, Count uint32

	sub *Subscription
	mem *Member
	seq uint64
	// handled is where the handled frontier stands once this event is
	// handed over (it ends its transaction, or Composite is set); zero
	// when it does not move it.
	handled Cursor
}

// Cursor returns the position just after e: a resume from it starts with
// the entry after e.
func (e Event) Cursor() Cursor {
	if e.Index+1 >= e.Count {
		return Cursor{Key: e.Key}
	}
	return Cursor{Key: e.Key, Next: e.Index + 1}
}

func (o *SubscribeOptions) normalize() error {
	if o.YieldEvery <= 0 {
		o.YieldEvery = 100
	}
	if o.Buffer <= 0 {
		o.Buffer = 100
	}
	if o.Table == "" {
		if o.ID != "" || o.Prefix != "" {
			return fmt.Errorf("%w: an id or prefix scope needs a table: %w", ErrInvalidName, engine.ErrInvalidOption)
		}
		return nil
	}
	if o.ID != "" && o.Prefix != "" {
		return fmt.Errorf("table: subscribe: set ID or Prefix, not both: %w", engine.ErrInvalidOption)
	}
	if o.ID != "" {
		return validID(o.Table, o.ID)
	}
	return validTable(o.Table)
}

// errStopped ends a reader whose context ended; errHookStop one that a
// hook stopped.
var (
	errStopped  = errors.New("table: reader stopped")
	errHookStop = errors.New("table: reader stopped by a hook")
)

// reader is the one replay-and-follow loop behind Subscribe and Follow.
//
// Cursor rule: cur is the handled frontier. It moves to key K only after
// the entry with K's last index was read and every entry of the table
// carrying K was delivered or deliberately skipped (out of scope, filtered,
// superseded, a mark); other tables' entries alone never move it. In
// Composite mode it also moves inside K, right after each handled entry.
// Every early return (failed delivery, stop at a yield, stop while waiting
// for the consumer, cancelled context, error) leaves cur where it was, so a
// resume from cur never skips an entry that was not handled.
type reader struct {
	db *DB
	o  SubscribeOptions

	pos        pos    // last entry read
	past       Cursor // just past the last entry read, of any table
	cur        Cursor // handled frontier
	keyIn      bool   // an in-table entry carries pos.key
	live       bool   // caught up with the log; the tail's window suffices
	sinceYield int
	read       uint64
	snap       engine.Snapshot

	advanced func(Cursor) // called when cur moves, but past a delivered event: that carries the cursor (Event.handled)

	// step, when set, is held while the reader takes a batch and handles
	// it, and let go while it waits: a Fanout's inline routing (see
	// Fanout.step) takes it to move the reader on in another goroutine.
	step sync.Locker
	// handled, when set, runs after each batch the reader handled (and
	// before it yields the processor), whether or not it handled all of
	// it: a Fanout signals its members there (see Fanout.release).
	handled func()
}

func newReader(db *DB, o SubscribeOptions) *reader {
	r := &reader{db: db, o: o, cur: o.Start, pos: o.Start.pos()}
	if o.Inclusive && o.Start.Key > 0 {
		r.cur = Cursor{Key: o.Start.Key - 1}
		r.pos = r.cur.pos()
	}
	return r
}

// run reads until ctx ends or deliver fails; it returns errStopped when
// ctx ended, deliver's error, or the error that made it stop.
func (r *reader) run(ctx context.Context, deliver func(Event) error) error {
	defer r.closeSnap()
	if r.step == nil {
		r.step = noLock{}
	}
	for {
		if ctx.Err() != nil {
			return errStopped
		}
		wait, err := r.stepOnce(ctx, deliver)
		if err != nil {
			return err
		}
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
				return errStopped
			}
		}
	}
}

// noLock is the step lock of a reader no other goroutine moves on.
type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// stepOnce takes one batch, from the tail's window or the engine, and
// handles it, holding r.step. When there was nothing to read it returns
// the channel to wait on instead.
func (r *reader) stepOnce(ctx context.Context, deliver func(Event) error) (wait <-chan struct{}, err error) {
	r.step.Lock()
	defer r.step.Unlock()
	limit := r.o.YieldEvery - r.sinceYield
	batch, covered, changed := r.db.tail.after(r.pos, limit, true)
	if !covered || (len(batch) == 0 && !r.live) {
		// Replaying, or about to go live: the engine's log is the
		// truth, the tail may lag it. Once live, the tail's window
		// is enough, so a thousand live readers cost no engine scans.
		var err error
		batch, err = scanFrom(ctx, r.db.e, r.pos, limit)
		switch {
		case ctx.Err() != nil:
			return nil, errStopped
		case errors.Is(err, engine.ErrLogTruncated):
			return nil, fmt.Errorf("%w: resume from %s: %w", ErrHistoryUnavailable, r.pos.cursor(), err)
		case err != nil:
			return nil, fmt.Errorf("table: read log after %s: %w", r.pos.cursor(), err)
		}
		if len(batch) == 0 && r.db.tail.isDead() {
			return nil, ErrClosed
		}
		r.live = false
	}
	if len(batch) == 0 {
		if !r.live {
			r.live = true
			if h := r.o.Hooks.Live; h != nil && !h() {
				return nil, errHookStop
			}
		}
		return changed, nil
	}
	return nil, r.process(ctx, batch, deliver)
}

// stepLive handles what the tail's window holds past a live reader, in
// the calling goroutine, which holds r.step. Errors stay for run, which
// meets them again.
func (r *reader) stepLive(ctx context.Context, deliver func(Event) error) {
	for {
		if !r.live {
			return
		}
		batch, covered, _ := r.db.tail.after(r.pos, r.o.YieldEvery-r.sinceYield, false)
		if !covered || len(batch) == 0 || r.process(ctx, batch, deliver) != nil {
			return
		}
	}
}

func (r *reader) process(ctx context.Context, batch []*logEntry, deliver func(Event) error) error {
	defer r.closeSnap()
	if r.handled != nil {
		defer r.handled()
	}
	for _, e := range batch {
		if err := r.handle(ctx, e, deliver); err != nil {
			return err
		}
		r.read++
		if r.sinceYield++; r.sinceYield >= r.o.YieldEvery {
			r.sinceYield = 0
			if h := r.o.Hooks.Yield; h != nil && !h(r.read) {
				return errHookStop
			}
			if r.handled != nil {
				r.handled()
			}
			runtime.Gosched()
			if ctx.Err() != nil {
				return errStopped
			}
		}
	}
	return nil
}

// readPast moves the read position past e. Past the last entry of a
// transaction the position is the whole key: retention may remove that
// key once every consumer has handled it, and the next read must then
// start after it, not inside it.
func (r *reader) readPast(e *logEntry) {
	r.pos, r.past = e.pos, e.pos.cursorAfter(e.count)
	if e.last() {
		r.pos.idx = wholeKey
	}
}

// handle processes one entry; pos and cur move only when it was handled.
func (r *reader) handle(ctx context.Context, e *logEntry, deliver func(Event) error) error {
	if e.err != nil {
		return e.err
	}
	if e.pos.key != r.pos.key {
		r.keyIn = false
	}
	in := r.o.Table == "" || e.table == r.o.Table
	if !in {
		r.readPast(e)
		if e.last() && r.keyIn && !r.o.Composite {
			r.move(Cursor{Key: e.pos.key})
		}
		return nil
	}
	var next Cursor
	switch {
	case r.o.Composite:
		next = e.pos.cursorAfter(e.count)
	case e.last():
		next = Cursor{Key: e.pos.key}
	}
	delivered, err := r.offer(ctx, e, next, deliver)
	if err != nil {
		return err
	}
	r.readPast(e)
	r.keyIn = true
	switch {
	case next == (Cursor{}):
	case delivered:
		// The subscription moved its frontier as it handed the event
		// over (Event.handled).
		r.cur = next
	default:
		r.move(next)
	}
	return nil
}

// offer delivers an in-table entry unless it is out of scope, filtered or
// superseded, and reports whether it did. next is the handled frontier
// once the entry is handled (zero when it does not move); a delivered
// event carries it, so the subscription moves the frontier in the same
// step as it hands the event over.
func (r *reader) offer(ctx context.Context, e *logEntry, next Cursor, deliver func(Event) error) (bool, error) {
	switch e.op {
	case OpReload:
		return false, fmt.Errorf("%w: rows of table %q were bulk-loaded without history at log key %d", ErrHistoryUnavailable, e.table, e.pos.key)
	case OpMark:
		return false, nil
	}
	if r.o.ID != "" && e.id != r.o.ID || r.o.Prefix != "" && !strings.HasPrefix(e.id, r.o.Prefix) {
		return false, nil
	}
	ev := Event{Table: e.table, ID: e.id, Op: e.op, Value: e.value, Version: e.version, Key: e.pos.key, Index: e.pos.idx, Count: e.count}
	if r.o.Filter != nil && !r.o.Filter(ev) {
		return false, nil
	}
	if !r.o.IncludeSuperseded && (e.op == OpPut || e.op == OpDelete) {
		cur, ok, err := r.current(ctx, e)
		if err != nil {
			return false, err
		}
		if ok {
			if cur.Version != e.version {
				return false, nil
			}
			ev.Value = cur.Value
		}
	}
	ev.handled = next
	return true, deliver(ev)
}

// current reads the record e wrote from a snapshot taken after e was
// read, so it reflects e or a later write.
func (r *reader) current(ctx context.Context, e *logEntry) (Record, bool, error) {
	if r.snap == nil {
		s, err := r.db.e.Snapshot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return Record{}, false, errStopped
			}
			return Record{}, false, fmt.Errorf("table: read current version: %w", err)
		}
		r.snap = s
	}
	b, err := r.snap.Get(ctx, dataKey(kindRecord, e.table, e.id))
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return Record{}, false, nil
	case err != nil:
		if ctx.Err() != nil {
			return Record{}, false, errStopped
		}
		return Record{}, false, fmt.Errorf("table: read current version of %s/%q: %w", e.table, e.id, err)
	}
	rec, err := decodeRecord(e.table, e.id, b)
	return rec, err == nil, err
}

func (r *reader) closeSnap() {
	if r.snap != nil {
		_ = r.snap.Close()
		r.snap = nil
	}
}

func (r *reader) move(c Cursor) {
	r.cur = c
	if r.advanced != nil {
		r.advanced(c)
	}
}

// cursorAfter is the cursor just after the entry at p of a key with count
// entries.
func (p pos) cursorAfter(count uint32) Cursor {
	if p.idx+1 >= count {
		return Cursor{Key: p.key}
	}
	return Cursor{Key: p.key, Next: p.idx + 1}
}
