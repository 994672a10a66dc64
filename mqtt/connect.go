package mqtt

import (
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// connect handles the CONNECT: session takeover, clean start or resume,
// CONNACK, then the outbound side. False means the connection is refused.
func (c *conn) connect(cp *packet.Connect) bool {
	c.version = cp.Version
	c.w.SetVersion(cp.Version)
	ctx := c.ctx
	refuse := func(rc packet.ReasonCode) bool {
		_ = c.write(&packet.Connack{ReasonCode: rc})
		return false
	}
	props := &cp.Properties
	if c.version == packet.V5 && props.Has(packet.PropAuthMethod) {
		return refuse(packet.BadAuthenticationMethod) // no enhanced authentication
	}
	c.client = cp.ClientID
	assigned := false
	if c.client == "" {
		if c.version == packet.V311 && !cp.CleanStart {
			return refuse(packet.ClientIdentifierNotValid) // [MQTT-3.1.3-8]
		}
		c.client, assigned = assignClientID(), true
	}
	c.log = c.log.With("client", c.client)
	if rc, ok := c.authenticate(cp, assigned); !ok {
		return refuse(rc)
	}
	c.keepAlive = time.Duration(cp.KeepAlive) * time.Second
	serverKeepAlive, ok := c.capKeepAlive()
	if !ok {
		return refuse(packet.ClientIdentifierNotValid)
	}
	switch {
	case c.version == packet.V311 && cp.CleanStart:
		c.expiry = 0
	case c.version == packet.V311:
		c.expiry = c.b.persistentExpiry()
	default:
		c.expiry = c.capExpiry(props.SessionExpiry)
	}
	if cp.Will != nil {
		c.will = willMessage(c.client, cp.Will)
		c.willDelay = cp.Will.Properties.WillDelay
		if cp.Will.Properties.Has(packet.PropMessageExpiry) {
			c.willExpiry = cp.Will.Properties.MessageExpiry
		}
		c.sendWill = true
	}
	if c.version == packet.V5 && props.Has(packet.PropMaximumPacketSize) {
		c.w.SetMaxPacketSize(int(props.MaximumPacketSize))
	}
	window := 65535
	if c.version == packet.V5 && props.Has(packet.PropReceiveMaximum) {
		window = int(props.ReceiveMaximum)
	}
	if c.version == packet.V5 && props.Has(packet.PropTopicAliasMaximum) {
		c.aliasMax = props.TopicAliasMaximum // aliases the client accepts from the broker
	}

	if old := c.b.register(c); old != nil {
		old.takeover()
	}
	c.registered = true
	c.b.cancelWill(c.client)
	c.claimSession(ctx)

	present := false
	if cp.CleanStart {
		if err := c.b.discardSession(ctx, c.client); err != nil {
			c.log.Error("discard session", "err", err)
			return refuse(packet.ServerUnavailable)
		}
	} else {
		rec, _, ok, err := c.b.loadSession(ctx, c.client)
		if err != nil {
			c.log.Error("load session", "err", err)
			return refuse(packet.ServerUnavailable)
		}
		if ok {
			present = true
			c.rec = rec
		}
		// Ids staged by earlier connections: a first transmission on one
		// of them finds its slot taken, so its staging must not share a
		// commit with others (see group). A session's rows go before its
		// record (see discardTx): with no record there are none.
		if ok {
			err = c.b.db.Range(ctx, tableStaged, c.client+slotSep, func(r table.Record) bool {
				if pi, perr := strconv.ParseUint(r.ID[len(c.client)+len(slotSep):], 10, 16); !r.Deleted && perr == nil {
					if c.stagedBefore == nil {
						c.stagedBefore = map[uint16]bool{}
					}
					c.stagedBefore[uint16(pi)] = true
				}
				return true
			})
		}
		if err != nil {
			c.log.Error("load staged messages", "err", err)
			return refuse(packet.ServerUnavailable)
		}
	}
	if !present {
		head, err := c.b.db.Head(ctx)
		if err != nil {
			return refuse(packet.ServerUnavailable)
		}
		// A new session receives what is published after its CONNACK.
		c.rec = sessionRecord{Checkpoint: head, SentHigh: head}
	}
	c.rec.Version = c.version
	c.rec.Expiry = c.expiry
	c.rec.Online = true
	c.rec.Node, c.rec.Conn, c.rec.Claimed = c.b.opts.NodeID, c.token, false
	c.rec.DisconnectedAt = 0
	c.rec.Will = nil
	if c.will != nil {
		enc, _ := c.will.MarshalBinary()
		c.rec.Will = &willRecord{Msg: enc, Delay: c.willDelay}
	}
	tx := c.b.db.Begin()
	if err := putSession(tx, c.client, &c.rec); err != nil {
		return refuse(packet.ServerUnavailable)
	}
	if err := tx.Commit(ctx); err != nil {
		c.b.metrics.storeFailed(err)
		c.log.Error("persist session", "err", err)
		return refuse(packet.ServerUnavailable)
	}

	out, err := newOutbound(c, window, present)
	if err != nil {
		c.log.Error("restore session", "err", err)
		return refuse(packet.ServerUnavailable)
	}
	c.b.mu.Lock() // fanout and retention read c.out through b.conns
	c.out = out
	c.b.mu.Unlock()
	ack := &packet.Connack{SessionPresent: present}
	if c.version == packet.V5 {
		ap := &ack.Properties
		ap.SetReceiveMaximum(uint16(c.b.opts.ReceiveMaximum))
		ap.SetMaximumPacketSize(uint32(c.b.opts.MaxPacketSize))
		ap.SetTopicAliasMaximum(uint16(c.b.opts.TopicAliasMaximum))
		ap.SetRetainAvailable(1)
		ap.SetWildcardSubAvailable(1)
		ap.SetSubIDAvailable(1)
		ap.SetSharedSubAvailable(1)
		if assigned {
			ap.SetAssignedClientID(c.client)
		}
		if serverKeepAlive {
			ap.SetServerKeepAlive(uint16(c.keepAlive / time.Second))
		}
		if props.Has(packet.PropSessionExpiry) && c.expiry != props.SessionExpiry {
			ap.SetSessionExpiry(c.expiry)
		}
	}
	if c.write(ack) != nil {
		return false
	}
	c.b.metrics.connects.Add(1)
	for _, s := range c.rec.Subs {
		sub := s.sub(c.client)
		if sub.Group != "" {
			if err := c.b.startSharedNow(c.ctx); err != nil {
				c.log.Warn("connect: log head", "err", err)
				c.disconnect(packet.UnspecifiedError, "store unavailable")
				return false
			}
		}
		c.b.index.Add(sub)
	}
	c.out.start()
	c.log.Debug("connected", "version", c.version.String(), "clean", cp.CleanStart, "present", present)
	return true
}

func (c *conn) capExpiry(v uint32) uint32 {
	if m := c.b.expiryCap(c.version == packet.V5); m > 0 && v > m {
		return m
	}
	return v
}

// register makes c the connection of its client id and returns the one it
// replaces.
func (b *Broker) register(c *conn) *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.conns[c.client]
	b.conns[c.client] = c
	return old
}

// teardown runs after the read loop ends: it stops the pipelines, persists
// the session (or discards it), and publishes the will when due.
func (c *conn) teardown() {
	c.fail(errClosedConn)
	c.acks.stop()
	c.out.stop()
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
	if handoff != nil {
		if err := c.handOff(ctx, *handoff); err != nil {
			c.log.Warn("hand session over", "err", err)
		}
	} else if c.expiry == 0 {
		if err := b.discardSession(ctx, c.client); err != nil {
			c.log.Warn("discard session", "err", err)
		}
	} else {
		c.rec.Online = false
		c.rec.DisconnectedAt = time.Now().UnixMilli()
		c.rec.Expiry = c.expiry
		if !c.willDue() {
			c.rec.Will = nil // a due will stays until published (see publishWill)
		}
		if err := c.out.persist(ctx, true); err != nil {
			c.log.Warn("persist session", "err", err)
		}
	}
	b.mu.Lock()
	current := b.conns[c.client] == c
	if current {
		delete(b.conns, c.client)
	}
	b.mu.Unlock()
	if current {
		c.out.unindex()
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

// willMessage converts a CONNECT's will into a message.
func willMessage(client string, w *packet.Will) *Message {
	m := &Message{Topic: w.Topic, Payload: append([]byte{}, w.Payload...), QoS: byte(w.QoS), Retain: w.Retain, From: client}
	setMessageProps(m, &w.Properties, time.Now())
	return m
}

// setMessageProps copies the 5.0 message properties of a PUBLISH or will.
func setMessageProps(m *Message, p *packet.Properties, now time.Time) {
	if p.Has(packet.PropPayloadFormat) {
		m.HasFormat, m.PayloadFormat = true, p.PayloadFormat
	}
	if p.Has(packet.PropMessageExpiry) {
		m.Expires = now.Add(time.Duration(p.MessageExpiry) * time.Second)
	}
	m.ContentType = p.ContentType
	m.ResponseTopic = p.ResponseTopic
	m.CorrelationData = cloneOrNil(p.CorrelationData)
	for _, u := range p.User {
		m.UserProps = append(m.UserProps, UserProperty{Key: u.Key, Value: u.Value})
	}
}

var _ = table.Cursor{}
