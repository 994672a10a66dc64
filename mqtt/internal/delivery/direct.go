package delivery

import (
	"sync"

	"github.com/tidemark-io/tidemark/engine"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// maxDirect bounds a session's queue of in-memory deliveries routed live;
// past it they are dropped (at most once, or a shared group's other
// members). The retained messages a SUBSCRIBE matched are queued whatever
// it holds (see offerAll).
const maxDirect = 1024

// Direct is an in-memory delivery: a message routed to the session
// without the log (QoS 0, a shared subscription's pick, a retained
// message), at QoS, with the matching subscriptions' identifiers and the
// RETAIN flag as sent.
type Direct struct {
	Msg    *message.Message
	QoS    byte
	IDs    []uint32
	Retain bool
	// Share is the shared subscription the delivery is for, zero for
	// any other: what the session could not deliver of it goes back to
	// the group (see Session.Unsent).
	Share topic.Share
	// At is the message's log position, when it was read from the log:
	// a shared group's queue keeps a delivery the session hands back
	// (Session.Unsent) under it, so the queue stays in log order.
	At LogPos
}

// LogPos is a message's place in the log: entry Index of the entries
// under log key Key in partition Part, when Set.
type LogPos struct {
	Key   engine.LogKey
	Index uint32
	Part  uint8
	Set   bool
}

// directQueue is a session's in-memory deliveries waiting for its sender.
// It holds nothing until used and lets a burst's memory go once drained,
// so an idle session costs a few words for it.
type directQueue struct {
	mu   sync.Mutex
	q    []Direct
	head int
	// more are the readers of retained messages still to read, in the
	// order their SUBSCRIBEs came (see OfferRetained): the next page is
	// read once the queue is empty, so a subscription matching millions
	// of retained messages holds one page of them in memory, not all.
	more []RetainedPages
}

// RetainedPages reads the next page of a subscription's retained
// messages; more is false on the last one (which may hold some still).
// It runs on the session's sender, which sends a page before it reads
// the next.
type RetainedPages func() (ds []Direct, more bool)

// Offer adds d, reporting false when the queue is full.
func (dq *directQueue) offer(d Direct) bool {
	dq.mu.Lock()
	if len(dq.q)-dq.head >= maxDirect {
		dq.mu.Unlock()
		return false
	}
	dq.q = append(dq.q, d)
	dq.mu.Unlock()
	return true
}

// offerAll adds ds whatever the queue holds. The retained messages of a
// SUBSCRIBE are owed to the subscriber [MQTT-3.3.1-6] and are in memory
// already, read for the SUBACK: the bound, which keeps a live stream from
// piling up behind a slow subscriber, would only drop them.
func (dq *directQueue) offerAll(ds []Direct) {
	dq.mu.Lock()
	dq.q = append(dq.q, ds...)
	dq.mu.Unlock()
}

// take removes the oldest delivery.
func (dq *directQueue) take() (Direct, bool) {
	dq.mu.Lock()
	defer dq.mu.Unlock()
	if dq.head == len(dq.q) {
		return Direct{}, false
	}
	d := dq.q[dq.head]
	dq.q[dq.head] = Direct{}
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

// addPages queues more behind what the queue holds.
func (dq *directQueue) addPages(more RetainedPages) {
	dq.mu.Lock()
	dq.more = append(dq.more, more)
	dq.mu.Unlock()
}

// pending reports whether anything is left to send: queued deliveries or
// retained pages still to read.
func (dq *directQueue) pending() bool {
	dq.mu.Lock()
	defer dq.mu.Unlock()
	return len(dq.q) > dq.head || len(dq.more) > 0
}

// refill reads the next page of retained messages into the queue when it
// is empty, reporting whether it queued any. Sender only (one reader at a
// time), and outside mu: a page is a read of the store.
func (dq *directQueue) refill() bool {
	for {
		dq.mu.Lock()
		if len(dq.q) > dq.head || len(dq.more) == 0 {
			queued := len(dq.q) > dq.head
			dq.mu.Unlock()
			return queued
		}
		next := dq.more[0]
		dq.mu.Unlock()
		ds, more := next()
		dq.mu.Lock()
		if !more {
			dq.more[0] = nil
			dq.more = dq.more[1:]
			if len(dq.more) == 0 {
				dq.more = nil
			}
		}
		dq.q = append(dq.q, ds...)
		dq.mu.Unlock()
	}
}

// dropPages forgets the retained pages not read yet (the session ends).
func (dq *directQueue) dropPages() {
	dq.mu.Lock()
	dq.more = nil
	dq.mu.Unlock()
}

// takeShared removes and returns the queued deliveries for shared
// subscriptions (the session ends).
func (dq *directQueue) takeShared() []Direct {
	dq.mu.Lock()
	defer dq.mu.Unlock()
	var out []Direct
	for _, d := range dq.q[dq.head:] {
		if d.Share != (topic.Share{}) {
			out = append(out, d)
		}
	}
	dq.q, dq.head = nil, 0
	return out
}
