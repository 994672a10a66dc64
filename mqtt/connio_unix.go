//go:build unix

package mqtt

import (
	"io"
	"os"
	"syscall"
)

// rawSocket returns src's socket when it is one, for connReader to wait
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
func (cr *connReader) readSocket() (int, error) {
	var n int
	var rerr error
	err := cr.rc.Read(func(fd uintptr) bool {
		cr.take()
		for {
			n, rerr = syscall.Read(int(fd), cr.buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			cr.drop()
			return false // wait for input, then try again
		}
		return true
	})
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
