package netio

import (
	"errors"
	"io"
)

// errShortWrite is a writer that took less than it was given.
var errShortWrite = errors.New("netio: short write")

// Writer is a buffered writer whose buffer comes from a pool on the
// first write and goes back at each Flush, so a connection holds a write
// buffer only while it has something to send.
//
// The buffer is sized to the burst: a small one (SmallWriteBuf) first,
// which is all a device sent a few messages needs, and a large one
// (WriteBuf) once a burst outgrows it. A writer whose last burst needed
// the large buffer starts the next one in a large buffer too, so a busy
// connection does not copy its way up at every flush; one whose burst fit
// the small buffer goes back to small ones. A fleet receiving a message
// each thus touches a page per connection, not eight.
//
// It is not safe for concurrent use (the connection's write lock guards
// it).
type Writer struct {
	dst io.Writer
	buf *[]byte
	// large says buf is (or the next one will be) a WriteBuf one.
	large bool
	err   error

	// State of a FlushNoWait, with the function it hands the socket,
	// made once: a closure made per flush would be an allocation per
	// delivery.
	writeFn   func(fd uintptr) bool
	nbWritten int
	nbErr     error
}

// Write buffers p, sending the buffer first when p does not fit, and p
// directly when it is larger than the buffer.
func (cw *Writer) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	if cw.buf == nil {
		cw.buf = cw.get()
	}
	b := *cw.buf
	if len(b)+len(p) > cap(b) {
		if !cw.large && len(b)+len(p) <= WriteBuf {
			// The burst outgrew the small buffer: move to a large one
			// rather than send a small write.
			cw.large = true
			nb := writeBufs.Get().(*[]byte)
			*nb = append((*nb)[:0], b...)
			cw.putSmall()
			cw.buf, b = nb, *nb
		} else {
			if err := cw.send(); err != nil {
				return 0, err
			}
			b = (*cw.buf)[:0]
			if len(p) >= cap(b) {
				return cw.write(p)
			}
		}
	}
	*cw.buf = append(b, p...)
	return len(p), nil
}

// get takes a buffer of the size the writer's last burst needed.
func (cw *Writer) get() *[]byte {
	if cw.large {
		return writeBufs.Get().(*[]byte)
	}
	return smallWriteBufs.Get().(*[]byte)
}

// putSmall gives back a small buffer; the writer holds none after.
func (cw *Writer) putSmall() {
	*cw.buf = (*cw.buf)[:0]
	smallWriteBufs.Put(cw.buf)
	cw.buf = nil
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
	n := cw.Buffered()
	err := cw.send()
	cw.release(n)
	return err
}

// release gives the buffer back to the pool after a burst of n bytes.
func (cw *Writer) release(n int) {
	if cw.buf == nil {
		return
	}
	*cw.buf = (*cw.buf)[:0]
	if cap(*cw.buf) == WriteBuf {
		writeBufs.Put(cw.buf)
		// A burst that would have fit the small buffer starts the next
		// one small again.
		cw.large = n > SmallWriteBuf
	} else {
		smallWriteBufs.Put(cw.buf)
	}
	cw.buf = nil
}

// NewWriter returns a Writer to dst.
func NewWriter(dst io.Writer) *Writer { return &Writer{dst: dst} }
