package broker

import (
	"errors"
	"net"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
)

// Accept backoff bounds: a listener failing for lack of descriptors or
// buffers recovers when connections close, so it waits and retries.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts on ln until the broker closes or ln is closed. A
// failed Accept (out of descriptors, buffers, an aborted handshake) is
// logged and retried after a growing pause; it never ends the listener.
func (b *Broker) acceptLoop(ln net.Listener) error {
	var delay time.Duration
	// Sockets accepted from a listening socket with TCP keep-alive on
	// have it on already (see netio.ListenerKeepsAlive): connect need not turn
	// it on for each.
	inherited := netio.ListenerKeepsAlive(ln)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if b.ctx.Err() != nil {
				return nil //nolint:nilerr // the broker closed: a clean end
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			b.metrics.AcceptErrors.Add(1)
			b.log.Warn("accept failed; retrying", "addr", ln.Addr().String(), "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-b.ctx.Done():
				t.Stop()
				return nil
			}
			continue
		}
		delay = 0
		b.serveConn(nc, inherited)
	}
}

// serveConn admits nc and serves it on a goroutine of its own, or closes
// it at once. tcpKeepAlive says nc has TCP keep-alive on already.
func (b *Broker) serveConn(nc net.Conn, tcpKeepAlive bool) {
	c := newConn(b, nc)
	c.tcpKeepAlive = tcpKeepAlive
	refused, evict := b.gate.Admit(&c.sock, time.Now())
	if evict != nil {
		b.metrics.Refused(counters.RefusedEvicted)
		_ = evict.Close()
	}
	if refused != "" {
		b.metrics.Refused(refused)
		_ = nc.Close()
		return
	}
	b.wg.Add(1) // done as the connection ends (see conn.released)
	go c.serve()
}
