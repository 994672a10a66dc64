package netio

import (
	"io"
	"sync"
	"syscall"
)

// Connection buffers come from pools and go back to them whenever a
// connection has nothing buffered, so a fleet of idle connections holds
// no buffer at all, and a busy one reads and writes in large chunks.
var (
	smallBufs = sync.Pool{New: func() any { return new([ConnectReadBuf]byte) }}
	readBufs  = sync.Pool{New: func() any { b := make([]byte, ReadBuf); return &b }}
	writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, WriteBuf); return &b }}
	// smallWriteBufs start every Writer's burst (see Writer).
	smallWriteBufs = sync.Pool{New: func() any { b := make([]byte, 0, SmallWriteBuf); return &b }}
)

// Reader is a buffered reader for a connection that lends its buffer
// out between bursts. Input comes into a small buffer; a read that fills
// it means a burst, and the next reads go into a large one until the
// socket has nothing more waiting. On a socket (a syscall.Conn) the
// reader waits for input holding no buffer at all: it reads without
// blocking and, when nothing is there, gives its buffer back before it
// waits. Other connections (TLS, WebSocket) keep the small buffer.
type Reader struct {
	src   io.Reader
	rc    syscall.RawConn // the socket's, when src has one
	small *[ConnectReadBuf]byte
	big   *[]byte
	buf   []byte // small[:], *big, or nil while waiting on rc
	r, w  int
	full  bool // the last fill filled buf
	err   error
	// readFn, n and rerr are readSocket's: the function it hands the
	// socket, and what that read.
	readFn func(fd uintptr) bool
	n      int
	rerr   error
}

// NewReader returns a Reader of src.
func NewReader(src io.Reader) *Reader {
	return &Reader{src: src, rc: rawSocket(src)}
}

// take makes buf the buffer the next fill reads into: the large one
// after a fill that filled its buffer, the small one otherwise.
func (cr *Reader) take() {
	if cr.full {
		if cr.small != nil {
			smallBufs.Put(cr.small)
			cr.small = nil
		}
		if cr.big == nil {
			cr.big = readBufs.Get().(*[]byte)
		}
		cr.buf = *cr.big
		return
	}
	if cr.big != nil {
		readBufs.Put(cr.big)
		cr.big = nil
	}
	if cr.small == nil {
		cr.small = smallBufs.Get().(*[ConnectReadBuf]byte)
	}
	cr.buf = cr.small[:]
}

// drop gives every buffer back; nothing may be buffered.
func (cr *Reader) drop() {
	if cr.small != nil {
		smallBufs.Put(cr.small)
		cr.small = nil
	}
	if cr.big != nil {
		readBufs.Put(cr.big)
		cr.big = nil
	}
	cr.buf, cr.r, cr.w = nil, 0, 0
}

// size is how much the next fill may read at most.
func (cr *Reader) size() int {
	if cr.full {
		return ReadBuf
	}
	return ConnectReadBuf
}

// fill reads into an empty buffer, choosing it first (see Reader).
func (cr *Reader) fill() error {
	if cr.err != nil {
		return cr.err
	}
	cr.r, cr.w = 0, 0
	var n int
	var err error
	if cr.rc != nil {
		n, err = cr.readSocket()
	} else {
		cr.take()
		n, err = cr.src.Read(cr.buf)
	}
	cr.w, cr.full = n, n > 0 && n == len(cr.buf)
	if n > 0 {
		cr.err = err
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// Read reads from the buffer, or straight into p when p is at least as
// large as the buffer and nothing is buffered.
func (cr *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if cr.r == cr.w {
		if len(p) >= cr.size() && cr.err == nil {
			if cr.rc != nil {
				cr.drop() // empty: held through a wait in src, it would idle
			}
			n, err := cr.src.Read(p)
			cr.full = n == len(p)
			return n, err
		}
		if err := cr.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, cr.buf[cr.r:cr.w])
	cr.r += n
	return n, nil
}

// ReadByte reads one byte.
func (cr *Reader) ReadByte() (byte, error) {
	if cr.r == cr.w {
		if err := cr.fill(); err != nil {
			return 0, err
		}
	}
	b := cr.buf[cr.r]
	cr.r++
	return b, nil
}

// Wait waits until input is buffered, reading what the socket has into
// a buffer. It fails as a read would: at the read deadline (after which
// the Reader is as it was, and may wait again once the deadline moves),
// at the end of the input, or on the socket's error.
func (cr *Reader) Wait() error {
	if cr.r < cr.w {
		return nil
	}
	return cr.fill()
}

// Buffered returns how many bytes can be read without a read from src.
func (cr *Reader) Buffered() int { return cr.w - cr.r }

// Peek returns the next n buffered bytes without consuming them; it
// never reads from src, and returns fewer when fewer are buffered.
func (cr *Reader) Peek(n int) []byte {
	return cr.buf[cr.r:min(cr.r+n, cr.w)]
}

// Idle gives the buffers back when nothing is buffered, for a connection
// that is about to wait for input elsewhere (a poller): a read that took
// the whole input leaves the small buffer held until the next read, which
// for an idle connection may be hours away. The reader stays usable.
func (cr *Reader) Idle() {
	if cr.r == cr.w {
		cr.drop()
	}
}

// MayHoldMore reports whether the socket may hold input the reader has
// not read: its last read filled what it read into. A read that came
// back short took all the socket had then.
func (cr *Reader) MayHoldMore() bool { return cr.full }

// Holding reports whether the reader holds a buffer.
func (cr *Reader) Holding() bool { return cr.small != nil || cr.big != nil }

// Release gives the buffers back; the reader is not used after.
func (cr *Reader) Release() {
	cr.drop()
}
