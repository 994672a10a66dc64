// Package admit decides which sockets a broker serves: a cap on the open
// sockets that never lets idle sockets lock connected clients out, and a
// rate limit per source address.
package admit

import (
	"net"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
)

// Socket is one accepted socket as a Gate tracks it; the connection that
// serves it holds it from Admit to Release.
type Socket struct {
	// Conn is the socket; the gate closes it when the gate closes before
	// its CONNECT.
	Conn net.Conn
	// prev and next link the sockets waiting for their CONNECT, and
	// waiting says this one is among them; the gate's lock guards all
	// three.
	prev, next *Socket
	waiting    bool
}

// Gate admits sockets. It counts every open socket against a cap (the
// broker's Options.MaxConnections) and keeps those that have not sent a CONNECT in
// arrival order: at the cap a new socket takes the place of the oldest of
// them, so idle sockets can never lock real clients out, and only when
// every socket belongs to a connected client is the new one closed. It
// also limits how fast one source address may open sockets.
type Gate struct {
	max   int
	rate  float64 // new sockets per second per source address; 0: no limit
	burst float64

	mu     sync.Mutex
	closed bool
	open   int // admitted sockets whose serve has not returned
	// head and tail are the pre-CONNECT sockets, oldest first, linked
	// through Socket.prev and Socket.next.
	head, tail *Socket
	waiting    int
	buckets    map[string]*bucket
	swept      time.Time
}

// bucket is a token bucket of one source address.
type bucket struct {
	tokens float64
	at     time.Time
}

// New returns a gate admitting at most max open sockets and, when rate
// is above 0, at most rate new sockets per second from one source
// address (in bursts of up to rate, at least one).
func New(max int, rate float64) *Gate {
	g := &Gate{max: max, rate: rate, burst: max1(rate)}
	if rate > 0 {
		g.buckets = map[string]*bucket{}
	}
	return g
}

func max1(v float64) float64 {
	if v < 1 {
		return 1
	}
	return v
}

// Admit decides on a new socket c. It returns the reason to refuse it, or
// "" with c counted as open and waiting for its CONNECT; then evict, when
// not nil, is a socket that made room and must be closed.
func (g *Gate) Admit(c *Socket, now time.Time) (refused string, evict net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return counters.RefusedClosing, nil
	}
	if g.rate > 0 && !g.takeLocked(sourceOf(c.Conn.RemoteAddr()), now) {
		return counters.RefusedRate, nil
	}
	if g.open >= g.max {
		if g.head == nil {
			return counters.RefusedCap, nil
		}
		// The evicted socket stays counted until its serve returns, which
		// closing it makes immediate: the cap is exceeded by at most the
		// evictions in flight.
		evict = g.head.Conn
		g.unlinkLocked(g.head)
	}
	g.open++
	c.waiting = true
	c.prev = g.tail
	if g.tail != nil {
		g.tail.next = c
	} else {
		g.head = c
	}
	g.tail = c
	g.waiting++
	return "", evict
}

// Connected takes c off the pre-CONNECT list: its CONNECT was read. False
// means c was evicted meanwhile and must end.
func (g *Gate) Connected(c *Socket) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.waiting {
		return false
	}
	g.unlinkLocked(c)
	return true
}

// Release forgets c once its serve has returned.
func (g *Gate) Release(c *Socket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.waiting {
		g.unlinkLocked(c)
	}
	g.open--
}

func (g *Gate) unlinkLocked(c *Socket) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		g.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		g.tail = c.prev
	}
	c.prev, c.next, c.waiting = nil, nil, false
	g.waiting--
}

// Close refuses every later socket and closes those still without a
// CONNECT; connected ones are the broker's to shut down.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	var pending []net.Conn
	for c := g.head; c != nil; c = c.next {
		pending = append(pending, c.Conn)
	}
	g.mu.Unlock()
	for _, nc := range pending {
		_ = nc.Close()
	}
}

// Counts returns the open sockets and those among them without a CONNECT.
func (g *Gate) Counts() (open, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.waiting
}

// takeLocked takes a token from src's bucket.
func (g *Gate) takeLocked(src string, now time.Time) bool {
	// A bucket that has refilled holds no information: drop such buckets
	// now and then so the map stays as small as the set of recent sources.
	full := time.Duration(g.burst / g.rate * float64(time.Second))
	if now.Sub(g.swept) > max(full, time.Second) {
		for k, bk := range g.buckets {
			if now.Sub(bk.at) >= full {
				delete(g.buckets, k)
			}
		}
		g.swept = now
	}
	bk := g.buckets[src]
	if bk == nil {
		bk = &bucket{tokens: g.burst, at: now}
		g.buckets[src] = bk
	}
	bk.tokens = min(g.burst, bk.tokens+now.Sub(bk.at).Seconds()*g.rate)
	bk.at = now
	if bk.tokens < 1 {
		return false
	}
	bk.tokens--
	return true
}

// sourceOf is the address a rate limit applies to: the host, without the
// port.
func sourceOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}
