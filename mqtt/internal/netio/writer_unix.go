//go:build unix

package netio

import "syscall"

// FlushNoWait sends what is buffered as far as the socket takes it now,
// never waiting for room: the rest stays buffered, in order, for the next
// Flush. It reports whether nothing is left. rc is the raw connection of
// the writer's destination, which must be that plain socket (not TLS or
// WebSocket framing over it).
//
// It lets a goroutine that must not be held up by a slow reader (a
// publisher delivering to a subscriber's connection) write in passing and
// leave what does not fit to the connection's own sender.
func (cw *Writer) FlushNoWait(rc syscall.RawConn) (bool, error) {
	if cw.err != nil {
		return false, cw.err
	}
	n := cw.Buffered()
	if n == 0 {
		return true, nil
	}
	if cw.writeFn == nil {
		cw.writeFn = cw.writeNoWait
	}
	cw.nbWritten, cw.nbErr = 0, nil
	if err := rc.Write(cw.writeFn); err != nil && cw.nbErr == nil {
		cw.nbErr = err
	}
	if cw.nbErr != nil {
		cw.err = cw.nbErr
		return false, cw.err
	}
	b := *cw.buf
	if cw.nbWritten == len(b) {
		cw.release(n)
		return true, nil
	}
	*cw.buf = b[:copy(b, b[cw.nbWritten:])]
	return false, nil
}

// writeNoWait writes the buffer from nbWritten on with non-blocking write
// calls until it is all written or the socket is full; it never asks the
// poller to wait.
func (cw *Writer) writeNoWait(fd uintptr) bool {
	b := *cw.buf
	for cw.nbWritten < len(b) {
		n, err := syscall.Write(int(fd), b[cw.nbWritten:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			cw.nbErr = err
			return true
		case n == 0:
			cw.nbErr = errShortWrite
			return true
		}
		cw.nbWritten += n
	}
	return true
}
