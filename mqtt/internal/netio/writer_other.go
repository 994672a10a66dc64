//go:build !unix

package netio

import "syscall"

// FlushNoWait is not available on this platform: it sends nothing and
// reports that the buffer still waits for Flush.
func (cw *Writer) FlushNoWait(syscall.RawConn) (bool, error) {
	return cw.Buffered() == 0, cw.err
}

// writeNow writes nothing on this platform: every write may wait.
func (cw *Writer) writeNow([]byte) (int, error) { return 0, nil }
