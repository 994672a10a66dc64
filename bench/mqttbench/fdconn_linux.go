package mqttbench

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/bench/internal/rawconn"
)

// fdConn is a TCP connection on a blocking socket, read and written with
// plain system calls. A goroutine reading it waits in the kernel, which
// wakes its thread when data arrives: none of the runtime's poller round
// trips (a read that finds nothing, a park, an epoll wait, a wake-up) that
// a net.Conn costs on each packet. At window 1 those were most of the
// load generator's CPU per exchange, as much as a fast broker's own. It
// holds a thread per waiting goroutine, so it serves loads with few
// connections (see blockingConns).
//
// Deadlines are approximations that suffice here: a future one sets the
// socket's receive and send timeouts to the time left, a past one shuts
// the socket down (it is how a cancelled dial ends a read), and the zero
// time clears the timeouts.
type fdConn struct {
	// mu is held shared by reads and writes and exclusively by Close, so
	// the descriptor is closed only once no system call uses it: a
	// descriptor number closed under a blocked read could be reused by
	// another socket before the read returns.
	mu     sync.RWMutex
	fd     int
	closed bool
	// closing is set before Close shuts the socket down: what a read or
	// write then meets is the close, reported as net.ErrClosed.
	closing atomic.Bool
	local   net.Addr
	remote  net.Addr
}

// dialBlocking connects to addr (host:port, IPv4) on a blocking socket.
func dialBlocking(ctx context.Context, addr string) (net.Conn, error) {
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Microsecond)
	}
	fd, ta, err := rawconn.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &fdConn{fd: fd, remote: ta}
	if timeout > 0 {
		_ = c.SetDeadline(time.Time{})
	}
	if ls, err := syscall.Getsockname(fd); err == nil {
		if l, ok := ls.(*syscall.SockaddrInet4); ok {
			c.local = &net.TCPAddr{IP: net.IP(l.Addr[:]), Port: l.Port}
		}
	}
	return c, nil
}

func (c *fdConn) Read(b []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	for {
		n, err := syscall.Read(c.fd, b)
		switch {
		case err == syscall.EINTR:
			continue
		case (err != nil || n == 0) && c.closing.Load():
			return 0, net.ErrClosed
		case err == syscall.EAGAIN:
			return 0, os.ErrDeadlineExceeded
		case err != nil:
			return 0, &net.OpError{Op: "read", Net: "tcp", Addr: c.remote, Err: err}
		case n == 0 && len(b) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *fdConn) Write(b []byte) (int, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	done := 0
	for done < len(b) {
		n, err := syscall.Write(c.fd, b[done:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil && c.closing.Load():
			return done, net.ErrClosed
		case err == syscall.EAGAIN:
			return done, os.ErrDeadlineExceeded
		case err != nil:
			return done, &net.OpError{Op: "write", Net: "tcp", Addr: c.remote, Err: err}
		}
		done += n
	}
	return done, nil
}

// Close shuts the socket down, which wakes a read or write waiting on it,
// then closes the descriptor once they returned.
func (c *fdConn) Close() error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return net.ErrClosed
	}
	c.closing.Store(true)
	_ = syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.closed = true
	return syscall.Close(c.fd)
}

func (c *fdConn) LocalAddr() net.Addr  { return c.local }
func (c *fdConn) RemoteAddr() net.Addr { return c.remote }

func (c *fdConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *fdConn) SetReadDeadline(t time.Time) error {
	return c.timeout(syscall.SO_RCVTIMEO, t)
}

func (c *fdConn) SetWriteDeadline(t time.Time) error {
	return c.timeout(syscall.SO_SNDTIMEO, t)
}

// timeout applies deadline t as the socket's timeout opt (see fdConn).
func (c *fdConn) timeout(opt int, t time.Time) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return net.ErrClosed
	}
	var tv syscall.Timeval
	if !t.IsZero() {
		left := time.Until(t)
		if left <= 0 {
			return syscall.Shutdown(c.fd, syscall.SHUT_RDWR)
		}
		tv = syscall.NsecToTimeval(max(left, time.Microsecond).Nanoseconds())
	}
	return syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, opt, &tv)
}
