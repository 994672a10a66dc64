package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// Fanout is one follower of a table's log that hands each event to the
// members it concerns, so that many consumers of one log cost what their
// events cost, not consumers x events: the follower reads and decodes each
// entry once, and its Route function (a subscription index, say) names
// the members an event goes to. A member that is behind, or that joins at
// an old position, catches up by reading the log itself, on its own
// consumer's goroutine, and then joins the route at one position, with no
// gap and no duplicate at the switch.
//
// Members keep Subscription's two guarantees: the checkpoint never passes
// an event that was delivered and not acknowledged, and it moves over
// every entry the member did not want (so a member whose filters match
// nothing keeps up with the log at no cost).
type Fanout struct {
	db    *DB
	table string
	route func(ev Event, deliver func(*Member))
	max   int
	log   *slog.Logger

	// mu is held while the follower routes one event and moves cur, and
	// by a member joining the route, so a join sees a frontier that no
	// routing is halfway past.
	mu  sync.Mutex
	cur Cursor // every entry it covers was routed
	// published is cur as members' checkpoints read it, without mu: with
	// ten thousand sessions checkpointing after a wave of deliveries,
	// taking mu for it queued them by the thousand behind the follower,
	// and the follower behind them. Stored under mu wherever cur moves.
	published seqCursor
	// routing is the event being routed, under mu, and deliver the route's
	// deliver function for it: made once, so routing an event allocates
	// no closure.
	routing Event
	deliver func(*Member)

	// held are the members routed an event since the follower last
	// signalled them, and heldDeliveries how many events it queued for
	// them in all (an event routed to ten members counts ten); under mu
	// (see release).
	held           []*Member
	heldDeliveries int

	// members counts the members joined and not closed.
	members atomic.Int64

	// stepMu is held by whoever moves rd, the follower's current reader,
	// on: the follower's goroutine, or a goroutine that read new entries
	// into the DB's tail and routes them at once (see step).
	stepMu   sync.Mutex
	rd       *reader
	ctx      context.Context
	unfollow func()

	cancel context.CancelFunc
	done   chan struct{}
}

// FanoutOptions configures a Fanout.
type FanoutOptions struct {
	// Table is the table whose log events are routed.
	Table string
	// Start is where the follower starts (usually db.Head()): a member
	// joining below it catches up from the log first.
	Start Cursor
	// Route is called on the follower's goroutine for each event of
	// Table, in log order; it calls deliver once for each member the
	// event goes to (a second call for the same member and event is
	// ignored). Members not on the route (catching up, closed) ignore it.
	// Route must not block: it holds up every member. deliver may be
	// called only until Route returns.
	Route func(ev Event, deliver func(*Member))
	// MaxQueue is how many routed events a member may hold unreceived
	// before it leaves the route and catches up from the log on its own
	// (default 4096), so a slow member holds up no other and its memory
	// stays bounded.
	MaxQueue int
	// Logger receives the follower's warnings; slog.Default() when nil.
	Logger *slog.Logger
}

// NewFanout starts a follower of o.Table's log from o.Start. It runs until
// Close, the end of ctx or DB.Close; read errors are logged and retried,
// and it never skips an entry it has not routed, except those retention
// truncated before it read them.
func (db *DB) NewFanout(ctx context.Context, o FanoutOptions) (*Fanout, error) {
	if o.Route == nil {
		return nil, errors.New("table: NewFanout: nil Route")
	}
	if err := validTable(o.Table); err != nil {
		return nil, err
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	rctx, cancel, err := db.startReader(ctx)
	if err != nil {
		return nil, err
	}
	f := &Fanout{db: db, table: o.Table, route: o.Route, max: o.MaxQueue, log: o.Logger, cur: o.Start, cancel: cancel, done: make(chan struct{}), ctx: rctx}
	f.published.store(o.Start)
	f.deliver = func(m *Member) { m.routed(f.routing, f.cur) }
	f.unfollow = db.tail.follow(f.step)
	go func() {
		defer db.subs.Done()
		defer close(f.done)
		defer f.unfollow()
		f.run(rctx)
	}()
	return f, nil
}

// step routes, in the calling goroutine, what the tail's window holds
// past the follower, when the follower is live and its goroutine is not
// routing: an entry a committer read into the window (DB.Pump) reaches
// the members without waking the follower's goroutine first. Otherwise
// that goroutine routes it, woken by the window.
func (f *Fanout) step() {
	if !f.stepMu.TryLock() {
		return
	}
	defer f.stepMu.Unlock()
	if f.rd != nil && f.ctx.Err() == nil {
		f.rd.stepLive(f.ctx, f.routeOne)
	}
}

func (f *Fanout) run(ctx context.Context) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		f.mu.Lock()
		start := f.cur
		f.mu.Unlock()
		r := newReader(f.db, SubscribeOptions{Table: f.table, Start: start, IncludeSuperseded: true, Composite: true, YieldEvery: 256})
		r.step = &f.stepMu
		r.handled = f.release
		f.stepMu.Lock()
		f.rd = r
		f.stepMu.Unlock()
		err := r.run(ctx, f.routeOne)
		f.stepMu.Lock()
		f.rd = nil
		f.stepMu.Unlock()
		switch {
		case ctx.Err() != nil || errors.Is(err, errStopped) || errors.Is(err, ErrClosed):
			return
		case errors.Is(err, ErrHistoryUnavailable):
			// Retention went past entries not routed yet: their members
			// see the truncation when they resume; the route goes on
			// from the oldest retained entry.
			st, serr := f.db.e.LogStats(ctx)
			if serr == nil && st.Floor > 0 {
				// With no member, nothing was owed the truncated entries.
				level := slog.LevelDebug
				if f.members.Load() > 0 {
					level = slog.LevelWarn
				}
				f.log.Log(ctx, level, "log truncated past the fanout follower; it goes on from the oldest retained entry", "err", err)
				f.mu.Lock()
				if c := (Cursor{Key: st.Floor - 1}); f.cur.Less(c) {
					f.cur = c
					f.published.store(c)
				}
				f.mu.Unlock()
				continue
			}
		}
		f.log.Error("fanout follower failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// routeOne routes ev and moves the frontier over it.
func (f *Fanout) routeOne(ev Event) error {
	ev.handled = Cursor{}
	after := ev.Cursor()
	f.mu.Lock()
	f.routing = ev
	f.route(ev, f.deliver)
	f.routing = Event{} // holds no value past its routing
	f.cur = after
	f.published.store(after)
	over := f.heldDeliveries >= maxHeldDeliveries
	f.mu.Unlock()
	if over {
		f.release()
	}
	return nil
}

// maxHeldDeliveries bounds the events the follower queues for members
// before it signals them, whatever its batch (see release): what members
// hold queued and unsignalled, and how long the first of them waits.
const maxHeldDeliveries = 1 << 16

// release signals the members routed events since the last release.
//
// The follower signals a member once per batch of the log it routes (a
// batch ends where the log's readable window ends, at YieldEvery entries
// or at maxHeldDeliveries events queued for members), not once per
// event. A member's receiver started by the first event of a batch would
// take that one event alone and start again for the next, while one
// started after the batch takes all its events in one go: with a message
// to each of 10,000 members, the receivers woken per event competed with
// the follower for the processors, and the route fell behind them, every
// message reaching a member on its own. The events are queued as they
// are routed: a receiver still running takes them without a signal.
func (f *Fanout) release() {
	f.mu.Lock()
	held := f.held
	f.held, f.heldDeliveries = nil, 0
	for _, m := range held {
		m.held = false
	}
	f.mu.Unlock()
	for _, m := range held {
		m.signal()
	}
}

// hold makes m one of the members the next release signals. f.mu held.
func (f *Fanout) hold(m *Member) {
	f.heldDeliveries++
	if !m.held {
		m.held = true
		f.held = append(f.held, m)
	}
}

// Close stops the follower and waits for it. Members stay readable; none
// is routed anything after.
func (f *Fanout) Close() error {
	f.cancel()
	<-f.done
	return nil
}

// Frontier returns the cursor that covers every entry the follower has
// routed: an event after it is routed after Frontier returned, to the
// members its Route names then. It waits for an event being routed, so
// a caller that has just changed what Route names gets a frontier past
// every event routed without the change.
func (f *Fanout) Frontier() Cursor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// frontier returns a cursor every entry it covers was routed: the
// frontier as the follower last published it, which may trail an event
// being routed (Frontier waits for that one). A checkpoint may trail.
func (f *Fanout) frontier() Cursor { return f.published.load() }

// seqCursor is a Cursor that one writer at a time stores and any
// goroutine loads without a lock: a load returns a cursor some store
// stored whole, never the key of one and the index of another.
type seqCursor struct {
	seq  atomic.Uint64 // odd while a store is under way
	key  atomic.Uint64
	next atomic.Uint32
}

// store publishes c. Stores must not run concurrently (Fanout.mu).
func (s *seqCursor) store(c Cursor) {
	s.seq.Add(1)
	s.key.Store(uint64(c.Key))
	s.next.Store(c.Next)
	s.seq.Add(1)
}

// load returns the cursor last stored.
func (s *seqCursor) load() Cursor {
	for {
		v := s.seq.Load()
		if v&1 == 0 {
			c := Cursor{Key: engine.LogKey(s.key.Load()), Next: s.next.Load()}
			if s.seq.Load() == v {
				return c
			}
		}
		runtime.Gosched()
	}
}

// Member is one consumer of a Fanout: the events routed to it (or read
// while it catches up) in log order, acknowledged with Ack, and a
// checkpoint over the log that a durable consumer persists. One goroutine
// receives (Next); Ack, Checkpoint and Close may be called from any.
//
// A member holds no goroutine and no buffer of its own: its queue grows
// with what is routed to it and is let go when drained.
type Member struct {
	f      *Fanout
	table  string
	filter func(Event) bool
	ready  chan struct{}
	notify func()

	mu       sync.Mutex
	live     bool    // on the route
	floor    Cursor  // on the route: entries it covers were read before joining
	frontier Cursor  // catching up: every entry it covers was handled
	rd       *reader // catching up: the member's own reader (receiver only)
	last     Cursor  // the position of the last routed event (dedup)
	queue    fifo[Event]
	pending  fifo[pending] // delivered events from seq front on, in order
	front    uint64
	closed   bool
	detaches int
	// held says the follower signals m at its next release; under f.mu.
	held bool
}

// Join adds a member that receives, from start on (exclusive), the events
// of the fanout's table that filter accepts (nil accepts all) while it
// catches up, and then those the route delivers to it. filter must agree
// with the route: an event the route would deliver, filter accepts.
func (f *Fanout) Join(start Cursor, filter func(Event) bool) *Member {
	f.members.Add(1)
	return &Member{f: f, table: f.table, filter: filter, ready: make(chan struct{}, 1), frontier: start}
}

// JoinFunc is Join for a receiver that runs only while it has work: where
// a Join member signals Ready, this one calls notify, so the receiver
// needs no goroutine waiting on a channel. notify runs on the goroutine
// that routed an event or restarted the member, possibly with the
// fanout's lock held: it must not block, nor call the fanout or the
// member. Ready of such a member is never signalled.
func (f *Fanout) JoinFunc(start Cursor, filter func(Event) bool, notify func()) *Member {
	f.members.Add(1)
	return &Member{f: f, table: f.table, filter: filter, notify: notify, frontier: start}
}

// routed queues ev for m, if m is on the route and ev is new to it; prev
// is the follower's frontier before ev. Follower only, f.mu held.
func (m *Member) routed(ev Event, prev Cursor) {
	m.mu.Lock()
	p := pos{key: ev.Key, idx: ev.Index}
	if !m.live || m.closed || m.floor.Covers(ev.Key, ev.Index) || (m.last != Cursor{} && m.last == ev.Cursor()) {
		m.mu.Unlock()
		return
	}
	if m.queue.len() >= m.f.max {
		// Too slow for the route: catch up from the log, from just
		// before ev, on the member's own time.
		m.live, m.frontier, m.rd = false, prev, nil
		if prev.Less(m.floor) {
			m.frontier = m.floor // read before it joined
		}
		m.detaches++
		m.mu.Unlock()
		m.f.hold(m)
		return
	}
	m.last = ev.Cursor()
	m.pushLocked(ev, p)
	m.mu.Unlock()
	m.f.hold(m)
}

func (m *Member) pushLocked(ev Event, p pos) {
	ev.mem, ev.sub = m, nil
	ev.seq = m.front + uint64(m.pending.len()) + 1
	m.pending.push(pending{p: p})
	m.queue.push(ev)
}

func (m *Member) signal() {
	if m.notify != nil {
		m.notify()
		return
	}
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled when Next may have something new: an event routed,
// or the member left the route and has the log to read.
func (m *Member) Ready() <-chan struct{} { return m.ready }

// Next returns the member's next event without waiting for one: ok is
// false when nothing is there now (wait on Ready). While the member
// catches up, Next reads the log on the caller's goroutine, and joins the
// route once it has read everything. An error (ErrHistoryUnavailable when
// retention passed the member's position, a read error, ErrClosed after
// Close) leaves the member where it was; Restart resumes it elsewhere.
func (m *Member) Next(ctx context.Context) (Event, bool, error) {
	for {
		m.mu.Lock()
		if m.queue.len() > 0 {
			ev := *m.queue.at(0)
			m.queue.popFront()
			if m.queue.len() == 0 && cap(m.queue.buf) > 64 {
				m.queue.buf = nil // a burst's backing array goes with it
			}
			m.mu.Unlock()
			return ev, true, nil
		}
		if m.closed {
			m.mu.Unlock()
			return Event{}, false, ErrClosed
		}
		if m.live {
			m.mu.Unlock()
			return Event{}, false, nil
		}
		if m.rd == nil {
			o := SubscribeOptions{Table: m.table, Start: m.frontier, IncludeSuperseded: true, Composite: true, Filter: m.filter}
			_ = o.normalize()
			m.rd = newReader(m.f.db, o)
		}
		rd := m.rd
		m.mu.Unlock()
		if err := m.catchUp(ctx, rd); err != nil {
			return Event{}, false, err
		}
	}
}

// catchUp reads one batch of the log into the queue, or joins the route
// when there is nothing left to read. Receiver only.
func (m *Member) catchUp(ctx context.Context, rd *reader) error {
	const batchMax = 128
	db := m.f.db
	// The follower routes only what the tail has published: once the
	// tail holds nothing past the member, it may join, and entries
	// committed meanwhile reach it through the route. Only a position the
	// tail does not reach back to is read from the engine.
	batch, covered, _ := db.tail.after(rd.pos, batchMax, false)
	if !covered {
		var err error
		batch, err = scanFrom(ctx, db.e, rd.pos, batchMax)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, engine.ErrLogTruncated):
			return fmt.Errorf("%w: resume from %s: %w", ErrHistoryUnavailable, rd.pos.cursor(), err)
		case err != nil:
			return fmt.Errorf("table: read log after %s: %w", rd.pos.cursor(), err)
		}
	}
	if len(batch) > 0 {
		err := rd.process(ctx, batch, func(ev Event) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.rd != rd {
				return errStopped // restarted meanwhile
			}
			ev.handled = Cursor{}
			m.pushLocked(ev, pos{key: ev.Key, idx: ev.Index})
			return nil
		})
		m.mu.Lock()
		if m.rd == rd && m.frontier.Less(rd.past) {
			m.frontier = rd.past
		}
		m.mu.Unlock()
		if errors.Is(err, errStopped) {
			return nil
		}
		return err
	}
	// Everything committed is read: join the route. The follower reads
	// the same log, so it cannot have routed an entry past what this
	// reader found; if it has (a race with a commit), read on.
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rd != rd {
		return nil
	}
	at := m.frontier
	if at.Less(m.f.cur) {
		return nil
	}
	m.live, m.floor, m.rd = true, at, nil
	return nil
}

// Restart takes the member off the route and has it catch up from from
// (exclusive), keeping what it holds: after ErrHistoryUnavailable, from
// is just before the oldest retained entry.
func (m *Member) Restart(from Cursor) {
	m.mu.Lock()
	m.live, m.rd, m.frontier = false, nil, from
	m.mu.Unlock()
	m.signal()
}

// Ack acknowledges a received event. Acks may come in any order; the
// checkpoint moves over an event only once it and every event delivered
// before it are acknowledged. Acking twice is harmless; an event of
// another member is an error.
func (m *Member) Ack(ev Event) error {
	if ev.mem != m || ev.seq == 0 {
		return fmt.Errorf("table: ack of an event this member did not receive (%s/%q at %d.%d)", ev.Table, ev.ID, ev.Key, ev.Index)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seq := ev.seq - 1
	if seq < m.front {
		return nil
	}
	i := seq - m.front
	if i >= uint64(m.pending.len()) {
		return fmt.Errorf("table: ack of event %d not yet delivered", ev.seq)
	}
	m.pending.at(int(i)).acked = true
	for m.pending.len() > 0 && m.pending.at(0).acked {
		m.pending.popFront()
		m.front++
	}
	if m.pending.len() == 0 && cap(m.pending.buf) > 64 {
		m.pending.buf = nil
	}
	return nil
}

// Checkpoint returns the acknowledged frontier: every entry it covers was
// skipped, or delivered and acknowledged. Resuming from it loses nothing
// the member received but did not acknowledge.
func (m *Member) Checkpoint() Cursor {
	routed := m.f.frontier() // before m's state: whatever it covers was queued already
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := m.frontier
	if m.live {
		cp = m.floor
		if cp.Less(routed) {
			cp = routed
		}
	}
	if m.pending.len() > 0 {
		if b := m.pending.at(0).p.before(); b.Less(cp) {
			cp = b
		}
	}
	return cp
}

// Live reports whether the member is on the route (caught up).
func (m *Member) Live() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// Behind reports whether the member has at least n events routed to it
// and not yet received, or is off the route catching up from the log: a
// receiver that is behind the writers.
func (m *Member) Behind(n int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.closed && (!m.live || m.queue.len() >= n)
}

// Detaches reports how often the member left the route for being too slow.
func (m *Member) Detaches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.detaches
}

// Close ends the member: nothing more is routed to it and Next returns
// ErrClosed once the queue is drained. Checkpoint and Ack keep working.
func (m *Member) Close() {
	routed := m.f.frontier()
	m.mu.Lock()
	if m.live {
		// Off the route, the frontier is the member's own.
		m.frontier = m.floor
		if m.frontier.Less(routed) {
			m.frontier = routed
		}
	}
	if !m.closed {
		m.f.members.Add(-1)
	}
	m.closed, m.live, m.rd = true, false, nil
	m.mu.Unlock()
	m.signal()
}

// before is the cursor that covers every entry before p and not p.
func (p pos) before() Cursor {
	if p.idx == 0 {
		return Cursor{Key: p.key - 1}
	}
	return Cursor{Key: p.key, Next: p.idx}
}
