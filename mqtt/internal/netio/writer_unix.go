//go:build unix

package netio

import (
	"errors"
	"os"
	"syscall"
)

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
	b := *cw.buf
	written, err := cw.writeNoWait(rc, b)
	if err != nil {
		cw.err = err
		return false, err
	}
	if written == len(b) {
		cw.release(n)
		return true, nil
	}
	*cw.buf = b[:copy(b, b[written:])]
	return false, nil
}

// writeNow writes as much of p as the writer's socket takes at once.
func (cw *Writer) writeNow(p []byte) (int, error) { return cw.writeNoWait(cw.rc, p) }

// writeNoWait writes as much of p to rc as it takes at once, never asking
// the poller to wait.
func (cw *Writer) writeNoWait(rc syscall.RawConn, p []byte) (int, error) {
	if cw.writeFn == nil {
		cw.writeFn = cw.writeFd
	}
	cw.nbSrc, cw.nbWritten, cw.nbErr = p, 0, nil
	err := rc.Write(cw.writeFn)
	if errors.Is(err, os.ErrDeadlineExceeded) && cw.waiting != nil {
		// A write deadline set for an earlier write that waited passed
		// since: the socket refuses every write until it is set again,
		// even one that would not wait.
		cw.waiting.WillWait()
		err = rc.Write(cw.writeFn)
	}
	if cw.nbErr != nil {
		err = cw.nbErr
	}
	n := cw.nbWritten
	cw.nbSrc, cw.nbErr = nil, nil
	return n, err
}

// writeFd writes nbSrc from nbWritten on with non-blocking write calls
// until it is all written or the socket is full.
func (cw *Writer) writeFd(fd uintptr) bool {
	b := cw.nbSrc
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
