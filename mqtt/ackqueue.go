package mqtt

import (
	"context"
	"sync"
)

// ackQueue is a connection's FIFO of acknowledgements waiting for their
// commits: any goroutine of the connection pushes, the ack loop pops. The
// ack loop runs only while there is something to acknowledge: a push
// starts it, and it ends once it drained the queue, so an idle
// connection has no goroutine for it. It
// holds at most max entries (pushers wait for room: the read loop's
// back-pressure) and no memory until used; the backing array of a burst
// is let go once the queue drains, so an idle connection costs a few
// words for it rather than a receive maximum of entries.
type ackQueue struct {
	mu   sync.Mutex
	q    []ackEntry
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
	wg      sync.WaitGroup
}

func newAckQueue(max int, loop func()) *ackQueue {
	return &ackQueue{max: max, loop: loop, room: make(chan struct{}, 1)}
}

// push appends e, waiting while the queue is full; false when ctx ended.
func (a *ackQueue) push(ctx context.Context, e ackEntry) bool {
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
func (a *ackQueue) startLocked() {
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

// claim reports whether the caller may act as the ack loop for one entry
// of its own: nothing is queued and no loop runs, so nothing is
// acknowledged before it. It then holds the loop's place until release.
func (a *ackQueue) claim() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.running || a.stopped || len(a.q) != a.head {
		return false
	}
	a.running = true
	a.wg.Add(1)
	return true
}

// release gives back the place claim took; ok false says the entry ended
// the connection's acknowledgements (as the loop ending on an error).
// Entries pushed meanwhile get the ack loop.
func (a *ackQueue) release(ok bool) {
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

func (a *ackQueue) wakeLocked() {
	select {
	case a.room <- struct{}{}:
	default:
	}
}

// tryPop removes the oldest entry, if any.
func (a *ackQueue) tryPop() (ackEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == a.head {
		return ackEntry{}, false
	}
	return a.popLocked(), true
}

func (a *ackQueue) popLocked() ackEntry {
	e := a.q[a.head]
	a.q[a.head] = ackEntry{}
	a.head++
	if a.head == len(a.q) {
		a.head = 0
		if cap(a.q) > 32 {
			a.q = nil
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

// popOrEnd removes the oldest entry, or, when there is none, records
// that the ack loop ends (it must return): the next push starts another.
func (a *ackQueue) popOrEnd() (ackEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == a.head {
		a.running = false
		return ackEntry{}, false
	}
	return a.popLocked(), true
}

// failed records that the ack loop ended on an error: no other starts.
func (a *ackQueue) failed() {
	a.mu.Lock()
	a.stopped, a.running = true, false
	a.mu.Unlock()
}

// stop lets no ack loop start again and waits for the running one.
func (a *ackQueue) stop() {
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.wg.Wait()
}

// free returns how many entries fit before a push waits.
func (a *ackQueue) free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.max - (len(a.q) - a.head)
}
