package broker

import (
	"time"
)

// The end of a connection: its pipelines stopped, its session persisted
// or discarded, and its will published or scheduled when due.

// teardown runs after the read loop ends: it stops the pipelines, persists
// the session (or discards it), and publishes the will when due.
func (c *conn) teardown() {
	c.fail(errClosedConn)
	c.acks.Stop()
	c.out.Stop()
	ctx := c.b.ctx
	if ctx.Err() != nil {
		// The broker is closing: persist with a fresh context.
		var cancel func()
		ctx, cancel = contextWithTimeout(5 * time.Second)
		defer cancel()
	}
	b := c.b
	c.stampWillExpiry()
	// Persist (or discard) while still registered: a reconnect of the same
	// client id waits for this connection to finish, so it always loads
	// the session this connection leaves behind.
	handoff := c.handoff.Load()
	persisted := false
	switch {
	case handoff != nil:
		if err := c.handOff(ctx, *handoff); err != nil {
			c.log.Warn("hand session over", "err", err)
		}
	case c.expiry == 0:
		if err := b.storeFor(c.client).Discard(ctx, c.client); err != nil {
			c.log.Warn("discard session", "err", err)
		}
	default:
		c.rec.Online = false
		c.rec.DisconnectedAt = time.Now().UnixMilli()
		c.rec.Expiry = c.expiry
		if !c.willDue() {
			c.rec.Will = nil // a due will stays until published (see publishWill)
		}
		// A broker sharing its store leaves the rows to be read: another
		// node's late commit may still write one.
		if err := c.out.PersistLast(ctx, c.rowless && !b.sharedStore()); err != nil {
			c.log.Warn("persist session", "err", err)
		}
		persisted = true
	}
	b.mu.Lock()
	current := b.conns[c.client] == c
	if current {
		delete(b.conns, c.client)
	}
	b.mu.Unlock()
	if current {
		c.out.Unindex()
		if persisted {
			// Its groups keep their messages for it while it is away
			// (see sharequeue.go).
			b.offline.add(c.client, c.out.Shares())
		}
	}
	if b.ctx.Err() == nil {
		// A newer connection of the client (a takeover) is a member too.
		leaving := c.client
		if !current {
			leaving = ""
		}
		b.reofferShared(c.client, leaving, c.out.Unsent())
	}
	// A takeover ends this connection like any other close: the will goes
	// when its delay is 0, and a delayed one is cancelled by the new
	// connection, which cancels wills after this teardown [MQTT-3.1.4-3].
	if c.willDue() && b.ctx.Err() == nil {
		delay := c.willDelay
		if c.expiry < delay {
			delay = c.expiry
		}
		b.scheduleWill(c.client, c.will, time.Duration(delay)*time.Second)
	}
	c.log.Debug("disconnected", "err", c.failErr)
}

// willDue reports whether the connection ended in a way that publishes its
// will: not after a DISCONNECT 0x00 [MQTT-3.1.2-10]. A broker shutting
// down closes connections without one, so their wills are due too.
func (c *conn) willDue() bool { return c.will != nil && c.sendWill }

// stampWillExpiry sets a due will's expiry from the time it will be
// published (after its delay), not from the CONNECT that carried it
// (3.1.3.2.4), and updates the copy the session record keeps.
func (c *conn) stampWillExpiry() {
	if !c.willDue() || c.willExpiry == 0 {
		return
	}
	delay := min(c.willDelay, c.expiry)
	c.will.Expires = time.Now().Add(time.Duration(uint64(delay)+uint64(c.willExpiry)) * time.Second)
	if c.rec.Will != nil {
		if enc, err := c.will.MarshalBinary(); err == nil {
			c.rec.Will.Msg = enc
		}
	}
}
