package netio

import (
	"errors"
	"io"
)

// errShortWrite is a writer that took less than it was given.
var errShortWrite = errors.New("netio: short write")

// Writer is a buffered writer whose buffer comes from a pool on the
// first write and goes back at each Flush, so a connection holds a write
// buffer only while it has something to send. It is not safe for
// concurrent use (the connection's write lock guards it).
type Writer struct {
	dst io.Writer
	buf *[]byte
	err error
}

// Write buffers p, sending the buffer first when p does not fit, and p
// directly when it is larger than the buffer.
func (cw *Writer) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	if cw.buf == nil {
		cw.buf = writeBufs.Get().(*[]byte)
	}
	b := *cw.buf
	if len(b)+len(p) > cap(b) {
		if err := cw.send(); err != nil {
			return 0, err
		}
		b = (*cw.buf)[:0]
		if len(p) >= cap(b) {
			return cw.write(p)
		}
	}
	*cw.buf = append(b, p...)
	return len(p), nil
}

func (cw *Writer) write(p []byte) (int, error) {
	n, err := cw.dst.Write(p)
	if err == nil && n < len(p) {
		err = errShortWrite
	}
	if err != nil {
		cw.err = err
	}
	return n, err
}

// send writes the buffer out and empties it.
func (cw *Writer) send() error {
	if cw.buf == nil || len(*cw.buf) == 0 {
		return cw.err
	}
	_, err := cw.write(*cw.buf)
	*cw.buf = (*cw.buf)[:0]
	return err
}

// Buffered returns how many bytes wait for Flush.
func (cw *Writer) Buffered() int {
	if cw.buf == nil {
		return 0
	}
	return len(*cw.buf)
}

// Flush sends what is buffered and gives the buffer back to the pool.
func (cw *Writer) Flush() error {
	err := cw.send()
	if cw.buf != nil {
		writeBufs.Put(cw.buf)
		cw.buf = nil
	}
	return err
}

// NewWriter returns a Writer to dst.
func NewWriter(dst io.Writer) *Writer { return &Writer{dst: dst} }
