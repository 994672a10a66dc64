// Package ackqueue is a connection's FIFO of acknowledgements waiting
// for their commits, and the single loop that sends them.
//
// Its invariants: entries are popped in the order they were pushed; at
// most one ack loop (or one claimer, see Queue.Claim) runs at a time, so
// no acknowledgement overtakes another; the queue holds at most its
// maximum, pushers waiting for room; and once stopped, no loop starts
// again.
package ackqueue

import (
	"context"
	"sync"
)

// Queue is a connection's FIFO of acknowledgements waiting for their
// commits: any goroutine of the connection pushes, the ack loop pops. The
// ack loop runs only while there is something to acknowledge: a push
// starts it, and it ends once it drained the queue, so an idle
// connection has no goroutine for it. It
// holds at most max entries (pushers wait for room: the read loop's
// back-pressure) and no memory until used; the backing array of a burst
// is let go once the queue drains, so an idle connection costs a few
// words for it rather than a receive maximum of entries.
//
// E is the entry type; Queue never looks inside it.
type Queue[E any] struct {
	mu   sync.Mutex
	q    []E
	head int
	max  int
	// room is signalled when a pusher waits and there is room; each
	// pusher that takes room passes the signal on while room is left.
	room    chan struct{}
	waiters int
	// loop is the ack loop; running says one is on, stopped that none
	// may start again (the connection is ending). spawn starts it (a new
	// goroutine when nil).
	loop    func()
	run     func() // loop, counted in wg; made once
	spawn   func(func())
	running bool
	stopped bool
	// shrink asks the queue to let go of its array once it drains (see
	// Shrink).
	shrink bool
	// keep is the largest array, in entries, kept when the queue drains
	// (see KeepOnDrain).
	keep int
	wg   sync.WaitGroup
}

// defaultKeep is KeepOnDrain's bound until it is called: a connection
// that goes idle without a Shrink keeps at most this many entries' room.
const defaultKeep = 32

// New returns an empty queue of at most max entries whose ack loop is
// loop, started by spawn (a new goroutine when spawn is nil). loop pops
// with TryPop and PopOrEnd and returns once PopOrEnd reports the end (or
// after Failed).
func New[E any](max int, loop func(), spawn func(func())) *Queue[E] {
	return &Queue[E]{max: max, loop: loop, spawn: spawn, room: make(chan struct{}, 1), keep: defaultKeep}
}

// KeepOnDrain keeps arrays of up to n entries when the queue drains, for
// a connection whose idleness is marked by Shrink: a client pipelining in
// bursts then reuses one array instead of growing a new one from nothing
// after every burst. Call it before the queue is used.
func (a *Queue[E]) KeepOnDrain(n int) {
	a.mu.Lock()
	a.keep = n
	a.mu.Unlock()
}

// Push appends e, waiting while the queue is full; false when ctx ended.
func (a *Queue[E]) Push(ctx context.Context, e E) bool {
	for {
		a.mu.Lock()
		if len(a.q)-a.head < a.max {
			a.q = append(a.q, e)
			if !a.running && !a.stopped {
				a.startLocked()
			}
			if a.waiters > 0 && len(a.q)-a.head < a.max {
				a.wakeLocked() // room for another waiting pusher too
			}
			a.mu.Unlock()
			return true
		}
		a.waiters++
		a.mu.Unlock()
		select {
		case <-a.room:
		case <-ctx.Done():
		}
		a.mu.Lock()
		a.waiters--
		a.mu.Unlock()
		if ctx.Err() != nil {
			return false
		}
	}
}

// startLocked starts the ack loop; mu held, none running.
func (a *Queue[E]) startLocked() {
	a.running = true
	a.wg.Add(1)
	if a.run == nil {
		a.run = func() {
			defer a.wg.Done()
			a.loop()
		}
	}
	if a.spawn != nil {
		a.spawn(a.run)
	} else {
		go a.run()
	}
}

// Claim reports whether the caller may act as the ack loop for one entry
// of its own: nothing is queued and no loop runs, so nothing is
// acknowledged before it. It then holds the loop's place until Release.
func (a *Queue[E]) Claim() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running || a.stopped || len(a.q) != a.head {
		return false
	}
	a.running = true
	a.wg.Add(1)
	return true
}

// Release gives back the place Claim took; ok false says the entry ended
// the connection's acknowledgements (as the loop ending on an error).
// Entries pushed meanwhile get the ack loop.
func (a *Queue[E]) Release(ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wg.Done()
	a.running = false
	switch {
	case !ok:
		a.stopped = true
	case !a.stopped && len(a.q) != a.head:
		a.startLocked()
	}
}

func (a *Queue[E]) wakeLocked() {
	select {
	case a.room <- struct{}{}:
	default:
	}
}

// TryPop removes the oldest entry, if any.
func (a *Queue[E]) TryPop() (E, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == a.head {
		var zero E
		return zero, false
	}
	return a.popLocked(), true
}

func (a *Queue[E]) popLocked() E {
	e := a.q[a.head]
	var zero E
	a.q[a.head] = zero
	a.head++
	if a.head == len(a.q) {
		a.head = 0
		if cap(a.q) > a.keep || a.shrink {
			a.q, a.shrink = nil, false
		} else {
			a.q = a.q[:0]
		}
	} else if a.head > 256 && a.head*2 > len(a.q) {
		// Keep the live part at the front so the array does not creep.
		m := copy(a.q, a.q[a.head:])
		clear(a.q[m:])
		a.q, a.head = a.q[:m], 0
	}
	if a.waiters > 0 {
		a.wakeLocked()
	}
	return e
}

// PopOrEnd removes the oldest entry, or, when there is none, records
// that the ack loop ends (it must return): the next push starts another.
func (a *Queue[E]) PopOrEnd() (E, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == a.head {
		a.running = false
		var zero E
		return zero, false
	}
	return a.popLocked(), true
}

// Failed records that the ack loop ended on an error: no other starts.
func (a *Queue[E]) Failed() {
	a.mu.Lock()
	a.stopped, a.running = true, false
	a.mu.Unlock()
}

// Stop lets no ack loop start again and waits for the running one.
func (a *Queue[E]) Stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.wg.Wait()
}

// Shrink lets go of the entries' array, now if the queue is empty or
// else once it drains, so an idle connection holds none: the next Push
// makes a new one. A connection that parks as soon as it has handled its
// input parks with the acknowledgements of that input still queued.
func (a *Queue[E]) Shrink() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == a.head {
		a.q, a.head, a.shrink = nil, 0, false
		return
	}
	a.shrink = true
}

// Holding reports whether the queue holds an entries' array.
func (a *Queue[E]) Holding() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.q != nil
}

// Free returns how many entries fit before a push waits.
func (a *Queue[E]) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.max - (len(a.q) - a.head)
}
