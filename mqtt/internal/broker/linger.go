package broker

import (
	"io"
	"time"
)

// failTold ends the connection after the client was sent why (a
// DISCONNECT or a refusing CONNACK). Closing a socket with unread input
// makes the kernel answer with a reset, and a reset makes the client's
// kernel drop what the client had not read yet, the reason among it. So
// the socket is half-closed instead (the client reads the reason, then
// end of stream) and serve reads and discards what the client still sends
// until it closes its side or lingerTimeout passes (closeSocket).
func (c *conn) failTold(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		if c.cancel != nil {
			c.cancel()
		}
		cw, ok := c.nc.(interface{ CloseWrite() error })
		if !ok {
			_ = c.nc.Close()
			return
		}
		// A writer blocked on a client that does not read would hold the
		// lock until the store timeout; this deadline frees it sooner.
		_ = c.nc.SetWriteDeadline(time.Now().Add(lingerTimeout))
		c.wmu.Lock()
		_ = c.flushLocked()
		_ = cw.CloseWrite()
		c.wmu.Unlock()
		c.lingering.Store(true)
		// Wake the read loop; the read loop checks the context after it
		// sets a deadline of its own, so this one is the last.
		_ = c.nc.SetReadDeadline(time.Now())
	})
}

// closeSocket closes the socket as serve returns, draining a half-closed
// one first (see failTold).
func (c *conn) closeSocket() {
	if c.lingering.Load() {
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.Copy(io.Discard, c.br)
	}
	_ = c.nc.Close()
	c.br.Release()
}
