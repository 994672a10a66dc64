package mqtt

import "sync"

// maxDirect bounds a session's queue of in-memory deliveries; past it
// they are dropped (at most once, or a shared group's other members).
const maxDirect = 1024

// direct is an in-memory delivery.
type direct struct {
	msg    *Message
	qos    byte
	ids    []uint32
	retain bool
}

// directQueue is a session's in-memory deliveries waiting for its sender.
// It holds nothing until used and lets a burst's memory go once drained,
// so an idle session costs a few words for it.
type directQueue struct {
	mu   sync.Mutex
	q    []direct
	head int
}

// offer adds d, reporting false when the queue is full.
func (dq *directQueue) offer(d direct) bool {
	dq.mu.Lock()
	if len(dq.q)-dq.head >= maxDirect {
		dq.mu.Unlock()
		return false
	}
	dq.q = append(dq.q, d)
	dq.mu.Unlock()
	return true
}

// take removes the oldest delivery.
func (dq *directQueue) take() (direct, bool) {
	dq.mu.Lock()
	defer dq.mu.Unlock()
	if dq.head == len(dq.q) {
		return direct{}, false
	}
	d := dq.q[dq.head]
	dq.q[dq.head] = direct{}
	dq.head++
	if dq.head == len(dq.q) {
		dq.head = 0
		if cap(dq.q) > 16 {
			dq.q = nil
		} else {
			dq.q = dq.q[:0]
		}
	}
	return d, true
}

func (dq *directQueue) len() int {
	dq.mu.Lock()
	defer dq.mu.Unlock()
	return len(dq.q) - dq.head
}
