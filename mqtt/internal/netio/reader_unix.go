//go:build unix

package netio

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// rawSocket returns src's socket when it is one, for Reader to wait
// on without a buffer.
func rawSocket(src io.Reader) syscall.RawConn {
	if sc, ok := src.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return rc
		}
	}
	return nil
}

// readSocket reads what the socket has into a buffer taken for it,
// waiting with none while it has nothing.
func (cr *Reader) readSocket() (int, error) {
	if cr.readFn == nil {
		// Made once: a closure made per read would be an allocation per
		// packet.
		cr.readFn = cr.readOnce
	}
	cr.n, cr.rerr = 0, nil
	err := cr.rc.Read(cr.readFn)
	n, rerr := cr.n, cr.rerr
	if n <= 0 {
		cr.drop() // nothing came: no buffer held for an ended socket
	}
	switch {
	case err != nil:
		return 0, err // a deadline, or the socket closed
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is readSocket's attempt at a read: it takes a buffer, reads
// without blocking, and gives the buffer back when nothing was there.
func (cr *Reader) readOnce(fd uintptr) bool {
	cr.take()
	for {
		cr.n, cr.rerr = syscall.Read(int(fd), cr.buf)
		if !errors.Is(cr.rerr, syscall.EINTR) {
			break
		}
	}
	if errors.Is(cr.rerr, syscall.EAGAIN) {
		cr.drop()
		return false // wait for input, then try again
	}
	return true
}
