// Package netio is the broker's connection I/O: the buffered reader and
// writer of a client connection, the WebSocket listener, and the socket
// settings the broker relies on (TCP keep-alive inherited from the
// listener, the open-file limit).
//
// Its buffers are what makes an idle fleet cheap: a Reader waits for
// input on a socket holding no buffer at all, and a Writer holds one only
// between its first Write and the next Flush. Both borrow large buffers
// from pools while a connection has traffic and give them back when it
// has none. A Reader or a Writer is used by one goroutine at a time.
package netio

// Buffer sizes.
const (
	// ConnectReadBuf is the read buffer a connection that is not a
	// socket (TLS, WebSocket) waits for input in (a CONNECT, or the next
	// packet of an idle client); larger packets are read through it.
	ConnectReadBuf = 512
	// ReadBuf and WriteBuf are the pooled buffers a connection borrows
	// while it has traffic (see Reader and Writer).
	ReadBuf  = 32 << 10
	WriteBuf = 32 << 10
	// SmallWriteBuf is the buffer a Writer starts each burst in: a page,
	// which holds a few dozen small PUBLISHes.
	SmallWriteBuf = 4 << 10
)
