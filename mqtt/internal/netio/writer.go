package netio

import (
	"errors"
	"io"
	"syscall"
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

	// The plain socket under dst, if any (see SetSocket), and what is
	// told before a write that may wait for room in it.
	rc      syscall.RawConn
	waiting WriteWaiter

	// State of a write that does not wait, with the function it hands
	// the socket, made once: a closure made per flush would be an
	// allocation per delivery.
	writeFn   func(fd uintptr) bool
	nbSrc     []byte
	nbWritten int
	nbErr     error
}

// WriteWaiter is told before a Writer's write that may wait for room in
// the socket.
type WriteWaiter interface {
	// WillWait runs, in the goroutine that writes (which holds what
	// guards the Writer), before a write that may wait: a write deadline
	// set there bounds the writes that wait, and costs the others
	// nothing.
	WillWait()
}

// SetSocket tells the writer about its destination: rc is the plain
// socket dst writes to (nil when dst frames what it is given, as TLS and
// WebSocket do), and w, if not nil, is told before any write that may
// wait. With a socket, the writer first writes what the socket takes at
// once, and w hears only of a write the socket did not take whole; without
// one, w hears of every write.
func (cw *Writer) SetSocket(rc syscall.RawConn, w WriteWaiter) {
	cw.rc, cw.waiting = rc, w
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
	done := 0
	if cw.rc != nil {
		var err error
		if done, err = cw.writeNow(p); err != nil {
			cw.err = err
			return done, err
		}
		if done == len(p) {
			return done, nil
		}
	}
	if cw.waiting != nil {
		cw.waiting.WillWait()
	}
	n, err := cw.dst.Write(p[done:])
	n += done
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
