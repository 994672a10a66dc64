package broker

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Parking. A connected client is idle most of the time, and a goroutine
// blocked reading its socket would hold a stack (4 KB once CONNECT was
// decoded on it) that every collection scans. So when the read loop has
// nothing buffered, it parks the connection on the broker's poller
// (netio.Poller) and its goroutine ends; the first of three events starts
// a new one where the loop left off: input on the socket, the keep-alive
// deadline, or the end of the connection's context (a takeover, a
// disconnect from another goroutine, the broker closing), which the
// connection's cancel and the broker's Close report (see conn.grow).

// Parking states.
const (
	running int32 = iota
	parked
)

// parking is a connection's side of the poller: its registration, its
// keep-alive timer and who resumes it.
type parking struct {
	c     *conn
	rc    syscall.RawConn
	id    uint64
	state atomic.Int32
	// timer resumes the read loop at the keep-alive deadline, where its
	// read fails with a timeout.
	timer *time.Timer
	// resume runs the read loop of the resumed connection; made once, as
	// a closure made per resume would be an allocation per wake-up.
	resume func()
}

// newParking returns c's parking, or nil when c cannot park (no poller,
// or a connection that is not a plain socket, such as TLS or WebSocket,
// whose reads may hold input the socket no longer has).
func newParking(c *conn) *parking {
	p := c.b.poller
	if p == nil {
		return nil
	}
	switch c.nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	rc, err := c.nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return nil
	}
	pk := &parking{c: c, rc: rc, resume: func() { c.run(true) }}
	// Made stopped, before the first park publishes the state a Ready
	// reads it under: armed only once parked, or its end could come
	// before the park and be lost.
	pk.timer = time.AfterFunc(time.Hour, func() { pk.Ready() })
	pk.timer.Stop()
	pk.id = p.Add(pk)
	return pk
}

// park parks the connection and reports true, after which the calling
// goroutine must not touch it: another may be running its read loop
// already. False means it could not park, or was resumed at once, and
// the caller reads on. more says the socket may hold input the read
// loop has not read (see netio.Poller.Arm).
func (pk *parking) park(deadline time.Time, more bool) bool {
	pk.state.Store(parked)
	if !deadline.IsZero() {
		pk.timer.Reset(time.Until(deadline))
	}
	err := pk.c.b.poller.Arm(pk.rc, pk.id, more)
	if err == nil && pk.c.ctx.Err() == nil {
		return true
	}
	// The context may have ended before its resume was registered to
	// see the connection parked: take it back unless someone else did.
	if !pk.state.CompareAndSwap(parked, running) {
		return true
	}
	pk.timer.Stop()
	return false
}

// Ready resumes a parked connection's read loop on a goroutine of the
// broker's runners, whose stack has most likely grown already to what
// reading and handling a packet takes (a new goroutine's would grow,
// copied, on every wake-up), and reports whether it did. It is
// called by the poller, the keep-alive timer and the context's end; the
// first wins, and a late one finding the loop running does nothing (or,
// after the connection parked again, resumes it early: the loop then
// parks again, or reads, waiting for input as it would without parking).
// A report of the poller's that finds the loop running disarms the
// socket until the next park (see netio.Poller).
func (pk *parking) Ready() bool {
	if !pk.state.CompareAndSwap(parked, running) {
		return false
	}
	pk.timer.Stop()
	pk.c.b.runners.Go(pk.resume)
	return true
}

// release frees the connection's registration as it ends.
func (pk *parking) release() {
	pk.timer.Stop()
	pk.c.b.poller.Remove(pk.id)
}
