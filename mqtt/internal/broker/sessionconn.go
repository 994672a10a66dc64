package broker

import (
	"context"

	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// sessionConn is a connection as its session's sending side sees it
// (delivery.Conn): a view of the same connection, not a copy.
type sessionConn conn

var _ delivery.Conn = (*sessionConn)(nil)

func (p *sessionConn) c() *conn { return (*conn)(p) }

func (p *sessionConn) Context() context.Context     { return p.ctx }
func (p *sessionConn) Logger() delivery.Logger      { return p.log }
func (p *sessionConn) V5() bool                     { return p.version == packet.V5 }
func (p *sessionConn) Write(pk packet.Packet) error { return p.c().write(pk) }
func (p *sessionConn) Flush()                       { p.c().flush() }
func (p *sessionConn) Fail(err error)               { p.c().fail(err) }
func (p *sessionConn) Warn(what string, err error)  { p.c().warn(what, err) }
func (p *sessionConn) Delivered(pi uint16)          { p.b.at(PointDelivered, p.client, pi) }

func (p *sessionConn) MayRead(topic string) bool {
	return p.b.guard.Allow(p.ctx, p.id, auth.AccessRead, topic)
}

func (p *sessionConn) WriteBuffered(pk packet.Packet) error { return p.c().writeBuffered(pk) }

func (p *sessionConn) ApplyAlias(pub *packet.Publish) { p.outAliases.Apply(pub, p.aliasMax) }

func (p *sessionConn) Push(e delivery.Pending) bool { return p.c().push(ackOf(e)) }

func (p *sessionConn) Send(e delivery.Pending) (ok, sent bool) {
	a := ackOf(e)
	if ok, sent = p.c().finishNow(a); sent {
		return ok, true
	}
	return p.c().push(a), false
}

func (p *sessionConn) LaterDelivery(write delivery.StateWrite, e delivery.Pending) bool {
	return p.c().laterDelivery(write.WriteState, ackOf(e))
}

func (p *sessionConn) Ack(pk packet.Packet) bool { return p.c().ack(ackEntry{pkt: pk}) }

func (p *sessionConn) Disconnect(rc packet.ReasonCode, why string) { p.c().disconnect(rc, why) }

// TryWrite writes pub from the calling goroutine if the connection's
// write lock is free and nothing is buffered before it (see
// delivery.Conn): a connection that parks only, whose socket the poller
// watches, so a write the socket does not take at once is finished by
// the session's sender.
func (p *sessionConn) TryWrite(pub *packet.Publish) (written, flushed bool, err error) {
	c := p.c()
	if c.pk == nil || !c.wmu.TryLock() {
		return false, false, nil
	}
	defer c.wmu.Unlock()
	if c.bw.Buffered() > 0 || c.nwriters.Load() > 0 {
		return false, false, nil // another writer's packets wait for its flush: after them
	}
	if c.version == packet.V5 {
		c.outAliases.Apply(pub, c.aliasMax)
	}
	if err = c.encodeLocked(pub); err == nil {
		flushed, err = c.bw.FlushNoWait(c.pk.rc)
	}
	return true, flushed, err
}

// InPassing reports whether the connection parks on the poller, which
// watches its socket: only then may TryWrite write (see TryWrite).
func (p *sessionConn) InPassing() bool { return p.pk != nil }

// ackOf is the FIFO entry of a session's pending entry.
func ackOf(e delivery.Pending) ackEntry {
	a := ackEntry{pkt: e.Pkt, ack: e.Ack, pi: e.PI, h: e.H, tooLarge: e.TooLarge, then: e.Then, notify: e.Notify}
	if e.Delivered {
		a.atSent = PointDelivered
	}
	return a
}
