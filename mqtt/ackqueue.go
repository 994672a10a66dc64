package mqtt

import (
	"context"
	"sync"
)

// ackQueue is a connection's FIFO of acknowledgements waiting for their
// commits: any goroutine of the connection pushes, the ack loop pops. It
// holds at most max entries (pushers wait for room: the read loop's
// back-pressure) and no memory until used; the backing array of a burst
// is let go once the queue drains, so an idle connection costs a few
// words for it rather than a receive maximum of entries.
type ackQueue struct {
	mu   sync.Mutex
	q    []ackEntry
	head int
	max  int
	// ready is signalled on push; room on pop from a full queue.
	ready chan struct{}
	room  chan struct{}
}

func newAckQueue(max int) *ackQueue {
	return &ackQueue{max: max, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// push appends e, waiting while the queue is full; false when ctx ended.
func (a *ackQueue) push(ctx context.Context, e ackEntry) bool {
	for {
		a.mu.Lock()
		if len(a.q)-a.head < a.max {
			a.q = append(a.q, e)
			a.mu.Unlock()
			select {
			case a.ready <- struct{}{}:
			default:
			}
			return true
		}
		a.mu.Unlock()
		select {
		case <-a.room:
		case <-ctx.Done():
			return false
		}
	}
}

// tryPop removes the oldest entry, if any.
func (a *ackQueue) tryPop() (ackEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(a.q) - a.head
	if n == 0 {
		return ackEntry{}, false
	}
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
	if n == a.max {
		select {
		case a.room <- struct{}{}:
		default:
		}
	}
	return e, true
}

// pop waits for the oldest entry; false when ctx ended.
func (a *ackQueue) pop(ctx context.Context) (ackEntry, bool) {
	for {
		if e, ok := a.tryPop(); ok {
			return e, true
		}
		select {
		case <-a.ready:
		case <-ctx.Done():
			return ackEntry{}, false
		}
	}
}

// free returns how many entries fit before a push waits.
func (a *ackQueue) free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.max - (len(a.q) - a.head)
}
