package broker

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// connectTerms carries what the steps of a CONNECT settle for the steps
// after them: mostly what its CONNACK reports back to the client.
type connectTerms struct {
	cp *packet.Connect
	// assigned says the broker assigned the client id: a 5.0 CONNACK
	// tells the client which (Assigned Client Identifier).
	assigned bool
	// serverKeepAlive says the broker lowered the client's keep alive: a
	// 5.0 CONNACK tells the client the one in force (Server Keep Alive).
	serverKeepAlive bool
	// window is the session's outbound in-flight window: Options.MaxInflight,
	// lowered to the client's Receive Maximum.
	window int
}

// connect handles the CONNECT: session takeover, clean start or resume,
// CONNACK, then the outbound side. False means the connection is refused.
//
// The steps run in this order because each relies on those before it: a
// client id is settled and authenticated before anything is registered
// under it; the connection's terms (keep alive, expiry, will, limits) are
// set before the session record that stores them is written; the
// session's previous holder lets go before the session is read; and the
// restored subscriptions are indexed before the read loop reads the
// packets behind the CONNECT.
func (c *conn) connect(cp *packet.Connect) bool {
	c.version = cp.Version
	c.w.SetVersion(cp.Version)
	t := connectTerms{cp: cp}
	if rc, ok := c.admit(&t); !ok {
		return c.refuseConnect(rc)
	}
	if !c.setKeepAlive(&t) {
		return c.refuseConnect(packet.ClientIdentifierNotValid)
	}
	c.setExpiryAndWill(cp)
	c.setFlowLimits(&t)
	c.takeSession(c.ctx)
	st, ok := c.restoreSession(c.ctx, &t)
	if !ok {
		return c.refuseConnect(packet.ServerUnavailable)
	}
	ack := c.connack(&t, st.present)
	if c.log.Enabled(slog.LevelDebug) { // its arguments would be allocated at every CONNECT
		c.log.Debug("connecting", "version", c.version.String(), "clean", cp.CleanStart, "present", st.present)
	}
	if st.h == nil {
		// The record goes with the SUBSCRIBE read behind the CONNECT, and
		// the CONNACK with its commit (see subscribeFollows).
		c.pendingConnack = &ackEntry{pkt: ack, after: c.connackFailed, then: c.connected}
		c.connectHead = st.head
		return true
	}
	return c.connectAck(ack, st.h, st.settled)
}

// refuseConnect answers a refused CONNECT with a CONNACK carrying rc and
// returns false, so the connection ends. A write error changes nothing:
// the connection ends either way.
func (c *conn) refuseConnect(rc packet.ReasonCode) bool {
	_ = c.write(&packet.Connack{ReasonCode: rc})
	return false
}

// admit settles who is connecting. It refuses what the broker does not
// offer (enhanced authentication) and an empty client id on a 3.1.1
// session that is to last [MQTT-3.1.3-8], assigns a client id to a client
// that left it empty, and authenticates. It runs first: nothing is
// registered under a client id before the id is settled and its client
// authenticated. False means the CONNECT is refused with the code
// returned.
func (c *conn) admit(t *connectTerms) (packet.ReasonCode, bool) {
	cp := t.cp
	if c.version == packet.V5 && cp.Properties.Has(packet.PropAuthMethod) {
		return packet.BadAuthenticationMethod, false // no enhanced authentication
	}
	c.client = cp.ClientID
	if c.client == "" {
		if c.version == packet.V311 && !cp.CleanStart {
			return packet.ClientIdentifierNotValid, false // [MQTT-3.1.3-8]
		}
		c.client, t.assigned = assignClientID(), true
	}
	c.db = c.b.dbFor(c.client)
	return c.authenticate(cp, t.assigned)
}

// setKeepAlive takes the client's keep alive, capped by
// Options.MaxKeepAlive (see capKeepAlive), and has TCP watch a client
// that keeps none alive itself. False refuses a 3.1.1 client over the
// cap, which cannot be told another value.
func (c *conn) setKeepAlive(t *connectTerms) bool {
	c.keepAlive = time.Duration(t.cp.KeepAlive) * time.Second
	serverKeepAlive, ok := c.capKeepAlive()
	if !ok {
		return false
	}
	t.serverKeepAlive = serverKeepAlive
	if c.keepAlive == 0 && !c.tcpKeepAlive {
		// No keep alive of its own: TCP's finds a peer that vanished. A
		// listener that leaves TCP keep-alive off (as `tidemark serve`'s
		// plain one does, to spare every connection its system calls)
		// relies on this, unless its listening socket has it on, which
		// accepted sockets inherit (see netio.ListenerKeepsAlive).
		if tc, ok := c.nc.(*net.TCPConn); ok {
			_ = tc.SetKeepAlive(true)
		}
	}
	return true
}

// setExpiryAndWill sets how long the session outlives the connection and
// the will the connection leaves, before the session record that stores
// both is written. A 3.1.1 clean session ends with its connection; a
// 3.1.1 persistent one lasts as the broker's persistent expiry says; a 5.0
// client asks, within the broker's cap.
func (c *conn) setExpiryAndWill(cp *packet.Connect) {
	switch {
	case c.version == packet.V311 && cp.CleanStart:
		c.expiry = 0
	case c.version == packet.V311:
		c.expiry = c.b.persistentExpiry()
	default:
		c.expiry = c.capExpiry(cp.Properties.SessionExpiry)
	}
	if cp.Will != nil {
		c.will = willMessage(c.client, cp.Will)
		c.willDelay = cp.Will.Properties.WillDelay
		if cp.Will.Properties.Has(packet.PropMessageExpiry) {
			c.willExpiry = cp.Will.Properties.MessageExpiry
		}
		c.sendWill = true
	}
}

// setFlowLimits takes the limits a 5.0 client sets on what the broker
// sends it: its maximum packet size, its Receive Maximum (which lowers
// the in-flight window, t.window) and its Topic Alias Maximum. They hold
// from the first packet the broker sends, restored QoS 2 state included.
func (c *conn) setFlowLimits(t *connectTerms) {
	props := &t.cp.Properties
	if c.version == packet.V5 && props.Has(packet.PropMaximumPacketSize) {
		c.w.SetMaxPacketSize(int(props.MaximumPacketSize))
	}
	t.window = c.b.opts.MaxInflight
	if c.version == packet.V5 && props.Has(packet.PropReceiveMaximum) {
		t.window = min(t.window, int(props.ReceiveMaximum))
	}
	if c.version == packet.V5 && props.Has(packet.PropTopicAliasMaximum) {
		c.aliasMax = props.TopicAliasMaximum // aliases the client accepts from the broker
	}
}

// takeSession makes this connection the holder of its client id's
// session before the session is read: it takes over the connection that
// held it on this broker, lets a retention move of its checkpoint finish,
// cancels the delayed will a previous connection left, and claims the
// session from a holder on another node (see claimSession), so the
// session read next is the one they leave behind.
func (c *conn) takeSession(ctx context.Context) {
	if old := c.b.register(c); old != nil {
		old.takeover()
	}
	c.registered = true
	// A retention move of this session's checkpoint under way finishes
	// before the session is read; none starts now (see beginQueueCut).
	c.b.awaitQueueCut(ctx, c.client)
	c.b.cancelWill(c.client)
	c.claimSession(ctx)
}

// restoreSession sets the session up on the store (see setupSession),
// hands its sending side to the broker, and indexes its restored
// subscriptions. False means the store failed (logged here): the CONNECT
// is refused with Server Unavailable.
func (c *conn) restoreSession(ctx context.Context, t *connectTerms) (sessionSetup, bool) {
	var st sessionSetup
	var err error
	c.b.onStore(func() { st, err = c.setupSession(ctx, t.cp.CleanStart, t.window) })
	if err != nil {
		c.b.metrics.StoreFailed(err)
		return sessionSetup{}, false
	}
	c.b.mu.Lock() // fanout and retention read c.out through b.conns
	c.out = st.out
	c.b.mu.Unlock()
	// The restored subscriptions are indexed before the read loop goes
	// on, so a SUBSCRIBE behind the CONNECT replaces them, never the
	// reverse. Its groups' queues come to it once it joins the route.
	c.b.offline.remove(c.client)
	for _, s := range c.rec.Subs {
		sub := s.Subscription(c.client)
		if sub.Group != "" {
			c.b.router.StartShared()
		}
		c.b.router.Index().Add(sub)
	}
	return st, true
}

// connack builds the CONNACK of an accepted CONNECT. A 5.0 one states the
// broker's limits and whatever it changed of what the client asked: the
// client id it assigned, the keep alive it lowered, the session expiry it
// capped.
func (c *conn) connack(t *connectTerms, present bool) *packet.Connack {
	ack := &packet.Connack{SessionPresent: present}
	if c.version == packet.V5 {
		props := &t.cp.Properties
		ap := &ack.Properties
		ap.SetReceiveMaximum(uint16(c.b.opts.ReceiveMaximum))
		ap.SetMaximumPacketSize(uint32(c.b.opts.MaxPacketSize))
		ap.SetTopicAliasMaximum(uint16(c.b.opts.TopicAliasMaximum))
		ap.SetRetainAvailable(1)
		ap.SetWildcardSubAvailable(1)
		ap.SetSubIDAvailable(1)
		ap.SetSharedSubAvailable(1)
		if t.assigned {
			ap.SetAssignedClientID(c.client)
		}
		if t.serverKeepAlive {
			ap.SetServerKeepAlive(uint16(c.keepAlive / time.Second))
		}
		if props.Has(packet.PropSessionExpiry) && c.expiry != props.SessionExpiry {
			ap.SetSessionExpiry(c.expiry)
		}
	}
	return ack
}

// subscribeFollows reports whether a whole SUBSCRIBE waits in the read
// buffer, the next packet to read. A CONNECT followed by one leaves its
// session record to the SUBSCRIBE's commit, which writes the whole record
// anyway: one record write and one commit per session set up, and the
// CONNACK waits for that commit, sent with the SUBACK. Anything else read
// first commits the record on its own (flushConnack).
func (c *conn) subscribeFollows() bool {
	return c.packetReady() && c.br.Peek(1)[0] == byte(packet.TypeSubscribe)<<4|0x02
}

// flushConnack commits the session record of a CONNECT whose CONNACK was
// left to the SUBSCRIBE behind it, and queues the CONNACK; true when there
// was none or it is queued. Read loop only.
func (c *conn) flushConnack() bool {
	e := c.pendingConnack
	if e == nil {
		return true
	}
	c.pendingConnack = nil
	var err error
	c.b.onStore(func() {
		tx := c.db.Begin()
		if err = session.Put(tx, c.client, &c.rec); err == nil {
			e.h, err = c.submit(tx)
		}
	})
	if err != nil {
		c.log.Error("persist session", "err", err)
		_ = c.write(&packet.Connack{ReasonCode: packet.ServerUnavailable})
		c.fail(err)
		return false
	}
	return c.push(*e)
}

// connectAck sends the CONNACK once what it reports is durable, and then
// starts the outbound side.
//
// A CONNACK that reports a session present, or follows a CONNECT that
// discarded a session or carries a will, or on a broker sharing its store
// with others (a node id), waits for the session record's commit: a crash
// must not bring back the discarded session, lose the will, or forget
// what the CONNACK said was there, and another node must find the
// session's holder. It waits in the ack
// FIFO, so the read loop meanwhile takes the packets sent behind the
// CONNECT, whose commits share the sync and whose acknowledgements follow
// the CONNACK. A new session without a will goes at once: until the
// record is durable a crash leaves no session, which is what the CONNACK
// said (session present 0), and the SUBACK of a SUBSCRIBE or the PUBACK of
// a PUBLISH behind it waits for a later commit, so for this one too (the
// engine completes commits in order).
func (c *conn) connectAck(ack *packet.Connack, h *engine.Handle, settled bool) bool {
	// With a packet sent behind the CONNECT already read, the CONNACK
	// waits too: that packet's acknowledgement follows a later commit
	// anyway, and the two go out in one write.
	if !settled || c.packetReady() {
		return c.push(ackEntry{pkt: ack, h: h, after: c.connackFailed, then: c.connected})
	}
	if c.write(ack) != nil {
		return false
	}
	c.connected()
	// A failed commit of the record still ends the connection.
	return c.push(ackEntry{h: h})
}

// connackFailed answers a CONNECT whose session record could not be
// stored: the server is unavailable. The error still ends the connection.
func (c *conn) connackFailed(err error) error {
	if err != nil {
		_ = c.write(&packet.Connack{ReasonCode: packet.ServerUnavailable})
	}
	return err
}

// connected runs once the CONNACK is written: packets other than
// acknowledgements may follow it from now on.
func (c *conn) connected() {
	c.connacked.Store(true)
	close(c.connackSent)
	c.b.metrics.Connects.Add(1)
	c.out.Start()
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
