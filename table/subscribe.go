package table

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Subscription is a replay-then-live stream of change-log events with two
// resume positions:
//
//   - Cursor is the handled frontier: every entry it covers was handed to
//     the Events channel or deliberately skipped. Events still queued in
//     the channel count as handled.
//   - Checkpoint is the acknowledged frontier: every entry it covers was
//     skipped or delivered and acknowledged with Ack. This is what a
//     durable consumer persists; resuming from it never loses an event
//     that was queued, received or in flight but not acknowledged,
//     whatever happens to the subscription or the process.
//
// Both are transaction-granular unless SubscribeOptions.Composite is set.
type Subscription struct {
	db      *DB
	events  chan Event
	cancel  context.CancelFunc
	done    chan struct{}
	closing atomic.Bool
	hooks   Hooks

	mu         sync.Mutex
	err        error
	cursor     Cursor
	checkpoint Cursor
	cands      fifo[Cursor]  // handled cursors above checkpoint, increasing
	pending    fifo[pending] // delivered events from seq front on, in order
	front      uint64
}

type pending struct {
	p     pos
	acked bool
}

// Subscribe starts a subscription (see SubscribeOptions). Its reader runs
// until Close, the end of ctx, DB.Close, or an error reported by Err; the
// Events channel is closed then.
func (db *DB) Subscribe(ctx context.Context, o SubscribeOptions) (*Subscription, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	rctx, cancel, err := db.startReader(ctx)
	if err != nil {
		return nil, err
	}
	s := &Subscription{
		db: db, events: make(chan Event, o.Buffer), cancel: cancel, done: make(chan struct{}),
		hooks: o.Hooks,
	}
	r := newReader(db, o)
	s.cursor, s.checkpoint = r.cur, r.cur
	r.advanced = s.advanced
	go func() {
		defer db.subs.Done()
		err := r.run(rctx, func(ev Event) error { return s.deliver(rctx, ev) })
		if errors.Is(err, errHookStop) {
			err = nil
		} else if errors.Is(err, errStopped) {
			switch {
			case s.closing.Load():
				err = nil
			case ctx.Err() != nil:
				err = ctx.Err()
			default:
				err = ErrClosed
			}
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		cancel()
		close(s.events)
		close(s.done)
	}()
	return s, nil
}

// startReader derives a reader context that also ends when the DB closes,
// and counts the reader so Close can wait for it.
func (db *DB) startReader(ctx context.Context) (context.Context, context.CancelFunc, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, nil, ErrClosed
	}
	db.subs.Add(1)
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(db.ctx, cancel)
	return rctx, func() { stop(); cancel() }, nil
}

// deliver hands ev over and moves the handled frontier to ev.handled in
// the same step: when there is room in the channel, under mu, so a
// consumer that acknowledged every event it received sees a checkpoint
// past all of them.
func (s *Subscription) deliver(ctx context.Context, ev Event) error {
	s.mu.Lock()
	ev.sub = s
	ev.seq = s.front + uint64(s.pending.len()) + 1
	s.pending.push(pending{p: pos{key: ev.Key, idx: ev.Index}})
	select {
	case s.events <- ev:
		s.handedLocked(ev)
		s.mu.Unlock()
		return nil
	default:
	}
	s.mu.Unlock()
	if h := s.hooks.Blocked; h != nil && !h() {
		s.mu.Lock()
		s.pending.popBack()
		s.mu.Unlock()
		return errHookStop
	}
	select {
	case s.events <- ev:
		// The consumer may have received and acknowledged ev already:
		// the checkpoint catches up now.
		s.mu.Lock()
		s.handedLocked(ev)
		s.mu.Unlock()
		return nil
	case <-ctx.Done():
		// Never handed over: it must not hold the checkpoint back.
		s.mu.Lock()
		s.pending.popBack()
		s.mu.Unlock()
		return errStopped
	}
}

// handedLocked moves the handled frontier to where ev leaves it, if
// anywhere.
func (s *Subscription) handedLocked(ev Event) {
	if ev.handled != (Cursor{}) {
		s.advancedLocked(ev.handled)
	}
}

// advanced records that the handled frontier moved to c.
func (s *Subscription) advanced(c Cursor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advancedLocked(c)
}

func (s *Subscription) advancedLocked(c Cursor) {
	s.cursor = c
	// A candidate with no delivered event after it is superseded by c.
	if s.cands.len() > 0 && (s.pending.len() == 0 || s.cands.back().Covers(s.pending.back().p.key, s.pending.back().p.idx)) {
		*s.cands.back() = c
	} else {
		s.cands.push(c)
	}
	s.advanceLocked()
}

func (s *Subscription) advanceLocked() {
	for s.pending.len() > 0 && s.pending.at(0).acked {
		s.pending.popFront()
		s.front++
	}
	for s.cands.len() > 0 {
		c := *s.cands.at(0)
		if s.pending.len() > 0 && c.Covers(s.pending.at(0).p.key, s.pending.at(0).p.idx) {
			break
		}
		s.checkpoint = c
		s.cands.popFront()
	}
}

// Events returns the event stream. It is closed when the subscription
// ends; events queued before that can still be received and acknowledged.
func (s *Subscription) Events() <-chan Event { return s.events }

// Ack acknowledges a received event. Acks may come in any order; the
// checkpoint moves over an event only once it and every event delivered
// before it are acknowledged. Acking an event twice is harmless; an event
// of another subscription is an error.
func (s *Subscription) Ack(ev Event) error {
	if ev.sub != s || ev.seq == 0 {
		return fmt.Errorf("table: ack of an event this subscription did not deliver (%s/%q at %d.%d)", ev.Table, ev.ID, ev.Key, ev.Index)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := ev.seq - 1
	if seq < s.front {
		return nil
	}
	i := seq - s.front
	if i >= uint64(s.pending.len()) {
		return fmt.Errorf("table: ack of event %d not yet delivered", ev.seq)
	}
	s.pending.at(int(i)).acked = true
	s.advanceLocked()
	return nil
}

// Cursor returns the handled frontier (see Subscription).
func (s *Subscription) Cursor() Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cursor
}

// Checkpoint returns the acknowledged frontier, the position a durable
// consumer persists and later resumes from (see Subscription).
func (s *Subscription) Checkpoint() Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpoint
}

// Unacked returns the number of delivered events not yet acknowledged
// (including acknowledged ones behind an older unacknowledged event).
func (s *Subscription) Unacked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.len()
}

// Close stops the subscription and waits for its reader to end. Cursor and
// Checkpoint stay readable and Ack keeps working for events received
// before.
func (s *Subscription) Close() error {
	s.closing.Store(true)
	s.cancel()
	<-s.done
	return nil
}

// Done is closed when the subscription has ended.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended: nil while it runs or after
// Close, the context's error, ErrClosed after DB.Close, or a read error
// such as ErrHistoryUnavailable.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Follow runs the replay-and-follow loop of Subscribe on the calling
// goroutine, calling fn for each event in log order, until ctx ends or fn
// returns an error, or a hook stops it. It returns the handled frontier (never past an event
// fn did not return nil for) and fn's error, ctx's error, or a read error.
//
// Follow is the cheap way to fan one log out to many consumers: once
// caught up it reads the DB's shared in-memory tail, so a broker runs one
// Follow over its message-log table and routes each event to the sessions
// whose filters match, instead of one Subscription per session. Sessions
// that are behind catch up with their own Subscription from their
// checkpoint; once caught up they, too, read the shared tail rather than
// the engine.
func (db *DB) Follow(ctx context.Context, o SubscribeOptions, fn func(Event) error) (Cursor, error) {
	if err := o.normalize(); err != nil {
		return o.Start, err
	}
	rctx, cancel, err := db.startReader(ctx)
	if err != nil {
		return o.Start, err
	}
	defer db.subs.Done()
	defer cancel()
	r := newReader(db, o)
	err = r.run(rctx, fn)
	if errors.Is(err, errHookStop) {
		err = nil
	} else if errors.Is(err, errStopped) {
		if err = ctx.Err(); err == nil {
			err = ErrClosed
		}
	}
	return r.cur, err
}
