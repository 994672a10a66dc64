package conformance

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The MQTT suites' client: a connection at the packet level, built on the
// broker's own codec, that sends exactly the packets a case names (a
// burst without reading, a duplicate PUBREL, a DUP PUBLISH with other
// bytes) and can drop the TCP connection at any point. A reader goroutine
// queues every packet the broker sends, so a case reads them in order and
// can also assert that nothing (more) arrived.

// Waits of the MQTT suites: waitFor bounds a wait for something that must
// happen (generous: two shared cores, four engines); quiet is how long a
// case listens to conclude that nothing more arrives.
const (
	waitFor = 15 * time.Second
	quiet   = 300 * time.Millisecond
)

// rawClient is one client connection.
type rawClient struct {
	t    T
	name string
	v    packet.Version
	nc   net.Conn

	wmu sync.Mutex
	in  chan packet.Packet

	done     chan struct{} // closed when the reader ends
	endErr   error         // why it ended; read after done
	closedAt time.Time
}

// dialRaw connects to addr and speaks protocol level v.
func dialRaw(t T, name, addr string, v packet.Version) *rawClient {
	t.Helper()
	c, err := tryDialRaw(t, name, addr, v)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", name, addr, err)
	}
	return c
}

func tryDialRaw(t T, name, addr string, v packet.Version) (*rawClient, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawClient{t: t, name: name, v: v, nc: nc, in: make(chan packet.Packet, 1<<16), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() { _ = c.nc.Close() })
	return c, nil
}

func (c *rawClient) readLoop() {
	defer close(c.done)
	rd := packet.NewReader(c.nc, packet.MaxPacketSize)
	rd.SetVersion(c.v)
	for {
		p, err := rd.ReadPacket()
		if err != nil {
			c.endErr, c.closedAt = err, time.Now()
			return
		}
		if pub, ok := p.(*packet.Publish); ok {
			p = clonePublish(pub)
			pub.Release()
		}
		select {
		case c.in <- p:
		default:
			c.endErr, c.closedAt = errors.New("client queue overflow"), time.Now()
			_ = c.nc.Close()
			return
		}
	}
}

// clonePublish copies a PUBLISH out of its Reader's buffer.
func clonePublish(p *packet.Publish) *packet.Publish {
	q := &packet.Publish{Topic: p.Topic, PacketID: p.PacketID, QoS: p.QoS, Retain: p.Retain, Dup: p.Dup,
		Properties: p.Properties, Payload: slices.Clone(p.Payload)}
	q.Properties.User = slices.Clone(p.Properties.User)
	q.Properties.SubscriptionIDs = slices.Clone(p.Properties.SubscriptionIDs)
	q.Properties.CorrelationData = slices.Clone(p.Properties.CorrelationData)
	return q
}

// connectPacket builds a CONNECT. A persistent session (clean false) gets
// a session expiry that never ends under 5.0, like 3.1.1.
func connectPacket(id string, v packet.Version, clean bool) *packet.Connect {
	cp := &packet.Connect{Version: v, ClientID: id, CleanStart: clean, KeepAlive: 60}
	if v == packet.V5 && !clean {
		cp.Properties.SetSessionExpiry(0xFFFFFFFF)
	}
	return cp
}

// connectRaw dials addr and connects as id; the CONNACK must accept.
func connectRaw(t T, name, addr, id string, v packet.Version, clean bool) (*rawClient, *packet.Connack) {
	t.Helper()
	c := dialRaw(t, name, addr, v)
	ack := c.connect(connectPacket(id, v, clean))
	return c, ack
}

// connect sends cp and returns the CONNACK, which must accept.
func (c *rawClient) connect(cp *packet.Connect) *packet.Connack {
	c.t.Helper()
	cp.Version = c.v
	c.send(cp)
	p := c.read("CONNACK")
	ack, ok := p.(*packet.Connack)
	if !ok {
		c.t.Fatalf("%s: got %s, want CONNACK", c.name, describe(p))
	}
	if ack.ReasonCode.IsError() {
		c.t.Fatalf("%s: CONNACK refused: %v", c.name, ack.ReasonCode)
	}
	return ack
}

// send writes the packets in one write, in order.
func (c *rawClient) send(ps ...packet.Packet) {
	c.t.Helper()
	if err := c.trySend(ps...); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
}

// trySend is send that reports the error (the broker may have closed).
func (c *rawClient) trySend(ps ...packet.Packet) error {
	var b []byte
	for _, p := range ps {
		var err error
		if b, err = p.Append(b, c.v); err != nil {
			return fmt.Errorf("encode %s: %w", describe(p), err)
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(waitFor))
	_, err := c.nc.Write(b)
	return err
}

// next returns the next packet within d; false when none came (or the
// connection ended with nothing queued).
func (c *rawClient) next(d time.Duration) (packet.Packet, bool) {
	select {
	case p := <-c.in:
		return p, true
	default:
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case p := <-c.in:
		return p, true
	case <-c.done:
		select {
		case p := <-c.in:
			return p, true
		default:
			return nil, false
		}
	case <-tm.C:
		return nil, false
	}
}

// read returns the next packet or fails the case.
func (c *rawClient) read(what string) packet.Packet {
	c.t.Helper()
	p, ok := c.next(waitFor)
	if !ok {
		c.t.Fatalf("%s: no %s within %v (connection: %s)", c.name, what, waitFor, c.state())
	}
	return p
}

func (c *rawClient) state() string {
	select {
	case <-c.done:
		return fmt.Sprintf("closed: %v", c.endErr)
	default:
		return "open"
	}
}

// expect reads the next packet and checks it is of type want with packet
// identifier pi (0: any); it returns the packet.
func (c *rawClient) expect(want packet.Type, pi uint16) packet.Packet {
	c.t.Helper()
	p := c.read(want.String())
	if p.Type() != want || (pi != 0 && packetID(p) != pi) {
		c.t.Fatalf("%s: got %s, want %v %d", c.name, describe(p), want, pi)
	}
	return p
}

// expectSeq reads len(want) packets and checks they are exactly want
// (type and packet identifier), in order.
func (c *rawClient) expectSeq(want ...ack) {
	c.t.Helper()
	for i, w := range want {
		p := c.read(fmt.Sprintf("response %d of %d (%v %d)", i+1, len(want), w.typ, w.pi))
		if p.Type() != w.typ || packetID(p) != w.pi {
			c.t.Fatalf("%s: response %d of %d is %s, want %v %d", c.name, i+1, len(want), describe(p), w.typ, w.pi)
		}
	}
}

// ack names an expected response by type and packet identifier.
type ack struct {
	typ packet.Type
	pi  uint16
}

// silence checks that nothing arrives within d.
func (c *rawClient) silence(d time.Duration) {
	c.t.Helper()
	if p, ok := c.next(d); ok {
		c.t.Fatalf("%s: unexpected %s", c.name, describe(p))
	}
}

// closed reports whether the broker closed the connection within d; the
// packets it sent before are still queued.
func (c *rawClient) closed(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// drop ends the TCP connection abruptly, without DISCONNECT.
func (c *rawClient) drop() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.nc.Close()
	<-c.done
}

// disconnect sends DISCONNECT and closes.
func (c *rawClient) disconnect() {
	_ = c.trySend(&packet.Disconnect{})
	_ = c.nc.Close()
	<-c.done
}

// drain returns every packet queued now.
func (c *rawClient) drain() []packet.Packet {
	var out []packet.Packet
	for {
		select {
		case p := <-c.in:
			out = append(out, p)
		default:
			return out
		}
	}
}

func packetID(p packet.Packet) uint16 {
	switch p := p.(type) {
	case *packet.Publish:
		return p.PacketID
	case *packet.Puback:
		return p.PacketID
	case *packet.Pubrec:
		return p.PacketID
	case *packet.Pubrel:
		return p.PacketID
	case *packet.Pubcomp:
		return p.PacketID
	case *packet.Suback:
		return p.PacketID
	case *packet.Unsuback:
		return p.PacketID
	}
	return 0
}

func reasonOf(p packet.Packet) packet.ReasonCode {
	switch p := p.(type) {
	case *packet.Puback:
		return p.ReasonCode
	case *packet.Pubrec:
		return p.ReasonCode
	case *packet.Pubrel:
		return p.ReasonCode
	case *packet.Pubcomp:
		return p.ReasonCode
	case *packet.Disconnect:
		return p.ReasonCode
	case *packet.Connack:
		return p.ReasonCode
	}
	return 0
}

func describe(p packet.Packet) string {
	if p == nil {
		return "nothing"
	}
	switch q := p.(type) {
	case *packet.Publish:
		return fmt.Sprintf("PUBLISH{pi %d qos %d dup %v retain %v %s %q}", q.PacketID, q.QoS, q.Dup, q.Retain, q.Topic, q.Payload)
	case *packet.Disconnect:
		return fmt.Sprintf("DISCONNECT{%v}", q.ReasonCode)
	}
	if pi := packetID(p); pi != 0 {
		return fmt.Sprintf("%v{pi %d rc %v}", p.Type(), pi, reasonOf(p))
	}
	return p.Type().String()
}

// Packet builders.

func pubQoS2(pi uint16, topic, payload string) *packet.Publish {
	return &packet.Publish{Topic: topic, PacketID: pi, QoS: packet.QoS2, Payload: []byte(payload)}
}

func pubQoS1(pi uint16, topic, payload string) *packet.Publish {
	return &packet.Publish{Topic: topic, PacketID: pi, QoS: packet.QoS1, Payload: []byte(payload)}
}

func dupOf(p *packet.Publish) *packet.Publish {
	q := *p
	q.Dup = true
	return &q
}

func pubrel(pi uint16) *packet.Pubrel { return &packet.Pubrel{PacketID: pi} }

// delivery is one application message a subscriber took.
type delivery struct {
	Topic, Payload string
	QoS            packet.QoS
	Dup, Retain    bool
	PI             uint16
	Conn           int // which connection of the subscriber received it
}

// subscriber is an MQTT receiver over rawClient that acknowledges like a
// compliant client: PUBACK for QoS 1; for QoS 2 it takes the message on
// its first PUBLISH and keeps the packet identifier until PUBREL, so a
// re-sent PUBLISH is not taken twice, across reconnects too (the state
// is the client's, not the connection's).
type subscriber struct {
	t       T
	name    string
	id      string
	v       packet.Version
	filter  string
	qos     packet.QoS
	recvMax uint16

	mu      sync.Mutex
	c       *rawClient
	conns   int
	got     []delivery
	pending map[uint16]bool // QoS 2 ids received, PUBREL not yet
	other   []packet.Packet // anything but PUBLISH and PUBREL
	changed chan struct{}
	stopped chan struct{}
}

// newSubscriber connects a persistent session (clean start, then kept)
// and subscribes to filter at qos.
func newSubscriber(t T, name, addr, id string, v packet.Version, filter string, qos packet.QoS) *subscriber {
	t.Helper()
	return newSubscriberWith(t, name, addr, id, v, filter, qos, 0)
}

// newSubscriberWith is newSubscriber with a 5.0 Receive Maximum
// (recvMax > 0) on every CONNECT, bounding its unacknowledged deliveries.
func newSubscriberWith(t T, name, addr, id string, v packet.Version, filter string, qos packet.QoS, recvMax uint16) *subscriber {
	t.Helper()
	s := &subscriber{t: t, name: name, id: id, v: v, filter: filter, qos: qos, recvMax: recvMax, pending: map[uint16]bool{}, changed: make(chan struct{}, 1)}
	// A fresh session that persists: 5.0 starts clean with an expiry that
	// never ends; 3.1.1 has only clean=false (each case's broker is new,
	// so no earlier session exists).
	c := dialRaw(t, name, addr, v)
	cp := s.connectPacket()
	cp.CleanStart = v == packet.V5
	ack := c.connect(cp)
	if ack.SessionPresent {
		t.Fatalf("%s: fresh session reported present", name)
	}
	c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}})
	sa := c.expect(packet.TypeSuback, 1).(*packet.Suback)
	if len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != packet.ReasonCode(qos) {
		t.Fatalf("%s: SUBACK %v, want granted QoS %d", name, sa.ReasonCodes, qos)
	}
	s.run(c)
	return s
}

func (s *subscriber) run(c *rawClient) {
	s.mu.Lock()
	s.c = c
	s.conns++
	n := s.conns
	s.stopped = make(chan struct{})
	stopped := s.stopped
	s.mu.Unlock()
	go func() {
		defer close(stopped)
		for {
			p, ok := c.next(time.Hour)
			if !ok {
				return
			}
			s.take(c, p, n)
		}
	}()
}

func (s *subscriber) take(c *rawClient, p packet.Packet, conn int) {
	s.mu.Lock()
	var reply packet.Packet
	switch p := p.(type) {
	case *packet.Publish:
		d := delivery{Topic: p.Topic, Payload: string(p.Payload), QoS: p.QoS, Dup: p.Dup, Retain: p.Retain, PI: p.PacketID, Conn: conn}
		switch p.QoS {
		case packet.QoS0:
			s.got = append(s.got, d)
		case packet.QoS1:
			s.got = append(s.got, d)
			reply = &packet.Puback{PacketID: p.PacketID}
		default:
			if !s.pending[p.PacketID] {
				s.pending[p.PacketID] = true
				s.got = append(s.got, d)
			}
			reply = &packet.Pubrec{PacketID: p.PacketID}
		}
	case *packet.Pubrel:
		delete(s.pending, p.PacketID)
		reply = &packet.Pubcomp{PacketID: p.PacketID}
	default:
		s.other = append(s.other, p)
	}
	s.mu.Unlock()
	if reply != nil {
		_ = c.trySend(reply)
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// reconnect resumes the session on addr (which must be present).
func (s *subscriber) reconnect(addr string) {
	s.t.Helper()
	c := dialRaw(s.t, s.name, addr, s.v)
	if ack := c.connect(s.connectPacket()); !ack.SessionPresent {
		s.t.Fatalf("%s: session not present on reconnect", s.name)
	}
	s.run(c)
}

func (s *subscriber) connectPacket() *packet.Connect {
	cp := connectPacket(s.id, s.v, false)
	if s.recvMax > 0 && s.v == packet.V5 {
		cp.Properties.SetReceiveMaximum(s.recvMax)
	}
	return cp
}

// drop ends the subscriber's connection abruptly and waits for its pump.
func (s *subscriber) drop() {
	s.mu.Lock()
	c, stopped := s.c, s.stopped
	s.mu.Unlock()
	c.drop()
	<-stopped
}

// deliveries returns what the subscriber took so far.
func (s *subscriber) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *subscriber) payloads() []string {
	var out []string
	for _, d := range s.deliveries() {
		out = append(out, d.Payload)
	}
	return out
}

// waitN waits until the subscriber took at least n messages.
func (s *subscriber) waitN(n int) []delivery {
	s.t.Helper()
	deadline := time.After(waitFor)
	for {
		if got := s.deliveries(); len(got) >= n {
			return got
		}
		select {
		case <-s.changed:
		case <-deadline:
			got := s.deliveries()
			s.t.Fatalf("%s: took %d messages within %v, want %d; last: %s", s.name, len(got), waitFor, n, lastPayloads(got, 5))
		}
	}
}

// waitTook waits until the subscriber took each of want at least once.
func (s *subscriber) waitTook(want ...string) {
	s.t.Helper()
	deadline := time.After(waitFor)
	for {
		n := countPayloads(s.deliveries())
		missing := ""
		for _, w := range want {
			if n[w] == 0 {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("%s: did not take %s within %v", s.name, missing, waitFor)
		}
	}
}

// expectExactly waits for the payloads want, in order, then checks that
// nothing more arrives within quiet.
func (s *subscriber) expectExactly(want ...string) []delivery {
	s.t.Helper()
	s.waitN(len(want))
	time.Sleep(quiet)
	got := s.deliveries()
	ps := make([]string, len(got))
	for i, d := range got {
		ps[i] = d.Payload
	}
	if !slices.Equal(ps, want) {
		s.t.Fatalf("%s: took %s, want exactly %s", s.name, abbrev(ps), abbrev(want))
	}
	return got
}

func lastPayloads(ds []delivery, n int) string {
	var ps []string
	for _, d := range ds[max(0, len(ds)-n):] {
		ps = append(ps, d.Payload)
	}
	return strings.Join(ps, ",")
}

// abbrev renders a list, eliding the middle of a long one.
func abbrev(ss []string) string {
	if len(ss) <= 12 {
		return "[" + strings.Join(ss, " ") + "]"
	}
	return fmt.Sprintf("[%s ... %s] (%d)", strings.Join(ss[:5], " "), strings.Join(ss[len(ss)-5:], " "), len(ss))
}

func seqPayloads(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}
