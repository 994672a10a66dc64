package mqtt

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
)

// gate admits sockets. It counts every open socket against
// Options.MaxConnections and keeps those that have not sent a CONNECT in
// arrival order: at the cap a new socket takes the place of the oldest of
// them, so idle sockets can never lock real clients out, and only when
// every socket belongs to a connected client is the new one closed. It
// also limits how fast one source address may open sockets.
type gate struct {
	max   int
	rate  float64 // new sockets per second per source address; 0: no limit
	burst float64

	mu     sync.Mutex
	closed bool
	open   int // admitted sockets whose serve has not returned
	// head and tail are the pre-CONNECT sockets, oldest first, linked
	// through conn.prev and conn.next.
	head, tail *conn
	waiting    int
	buckets    map[string]*bucket
	swept      time.Time
}

// bucket is a token bucket of one source address.
type bucket struct {
	tokens float64
	at     time.Time
}

func newGate(max int, rate float64) *gate {
	g := &gate{max: max, rate: rate, burst: max1(rate)}
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

// admit decides on a new socket c. It returns the reason to refuse it, or
// "" with c counted as open and waiting for its CONNECT; then evict, when
// not nil, is a socket that made room and must be closed.
func (g *gate) admit(c *conn, now time.Time) (refused string, evict *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return counters.RefusedClosing, nil
	}
	if g.rate > 0 && !g.takeLocked(sourceOf(c.nc.RemoteAddr()), now) {
		return counters.RefusedRate, nil
	}
	if g.open >= g.max {
		if g.head == nil {
			return counters.RefusedCap, nil
		}
		// The evicted socket stays counted until its serve returns, which
		// closing it makes immediate: the cap is exceeded by at most the
		// evictions in flight.
		evict = g.head
		g.unlinkLocked(evict)
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

// connected takes c off the pre-CONNECT list: its CONNECT was read. False
// means c was evicted meanwhile and must end.
func (g *gate) connected(c *conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.waiting {
		return false
	}
	g.unlinkLocked(c)
	return true
}

// release forgets c once its serve has returned.
func (g *gate) release(c *conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.waiting {
		g.unlinkLocked(c)
	}
	g.open--
}

func (g *gate) unlinkLocked(c *conn) {
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

// close refuses every later socket and closes those still without a
// CONNECT; connected ones are the broker's to shut down.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	var pending []net.Conn
	for c := g.head; c != nil; c = c.next {
		pending = append(pending, c.nc)
	}
	g.mu.Unlock()
	for _, nc := range pending {
		_ = nc.Close()
	}
}

// counts returns the open sockets and those among them without a CONNECT.
func (g *gate) counts() (open, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.waiting
}

// takeLocked takes a token from src's bucket.
func (g *gate) takeLocked(src string, now time.Time) bool {
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

// Accept backoff bounds: a listener failing for lack of descriptors or
// buffers recovers when connections close, so it waits and retries.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts on ln until the broker closes or ln is closed. A
// failed Accept (out of descriptors, buffers, an aborted handshake) is
// logged and retried after a growing pause; it never ends the listener.
func (b *Broker) acceptLoop(ln net.Listener) error {
	var delay time.Duration
	// Sockets accepted from a listening socket with TCP keep-alive on
	// have it on already (see netio.ListenerKeepsAlive): connect need not turn
	// it on for each.
	inherited := netio.ListenerKeepsAlive(ln)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if b.ctx.Err() != nil {
				return nil //nolint:nilerr // the broker closed: a clean end
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			b.metrics.AcceptErrors.Add(1)
			b.log.Warn("accept failed; retrying", "addr", ln.Addr().String(), "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-b.ctx.Done():
				t.Stop()
				return nil
			}
			continue
		}
		delay = 0
		b.serveConn(nc, inherited)
	}
}

// serveConn admits nc and serves it on a goroutine of its own, or closes
// it at once. tcpKeepAlive says nc has TCP keep-alive on already.
func (b *Broker) serveConn(nc net.Conn, tcpKeepAlive bool) {
	c := newConn(b, nc)
	c.tcpKeepAlive = tcpKeepAlive
	refused, evict := b.gate.admit(c, time.Now())
	if evict != nil {
		b.metrics.Refused(counters.RefusedEvicted)
		_ = evict.nc.Close()
	}
	if refused != "" {
		b.metrics.Refused(refused)
		_ = nc.Close()
		return
	}
	b.wg.Add(1) // done as the connection ends (see conn.released)
	go c.serve()
}
