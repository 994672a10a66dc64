package conformance

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The MQTT suites' clients: mqtttest.Raw, a connection at the packet
// level that sends exactly the packets a case names (a burst without
// reading, a duplicate PUBREL, a DUP PUBLISH with other bytes) and can
// drop the TCP connection at any point, and subscriber, a compliant
// receiver built on it.

// Waits of the MQTT suites: waitFor bounds a wait for something that must
// happen; quiet is how long a case listens to conclude that nothing more
// arrives. waitFor is generous because a passing case never waits it out,
// while under the race detector on two shared cores one commit group of a
// thousand sessions' teardowns on a shared JetStream stream was seen to
// hold every acknowledgement behind it for over 15 s: slow, not lost.
const (
	waitFor = 45 * time.Second
	quiet   = 300 * time.Millisecond
)

// rawClient is the suites' packet-level client (mqtttest.Raw).
type rawClient = mqtttest.Raw

// ack names an expected response by type and packet identifier.
type ack = mqtttest.Ack

// dialRaw connects to addr and speaks protocol level v.
func dialRaw(t T, name, addr string, v packet.Version) *rawClient {
	t.Helper()
	c := mqtttest.DialRaw(t, name, addr, v)
	c.Wait = waitFor
	return c
}

// connectRaw dials addr and connects as id; the CONNACK must accept.
func connectRaw(t T, name, addr, id string, v packet.Version, clean bool) (*rawClient, *packet.Connack) {
	t.Helper()
	c := dialRaw(t, name, addr, v)
	return c, c.Connect(mqtttest.ConnectPacket(id, v, clean))
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
	payload map[string]bool // the distinct payloads in got
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
	s := &subscriber{t: t, name: name, id: id, v: v, filter: filter, qos: qos, recvMax: recvMax, pending: map[uint16]bool{}, payload: map[string]bool{}, changed: make(chan struct{}, 1)}
	// A fresh session that persists: 5.0 starts clean with an expiry that
	// never ends; 3.1.1 has only clean=false (each case's broker is new,
	// so no earlier session exists).
	c := dialRaw(t, name, addr, v)
	cp := s.connectPacket()
	cp.CleanStart = v == packet.V5
	ack := c.Connect(cp)
	if ack.SessionPresent {
		t.Fatalf("%s: fresh session reported present", name)
	}
	c.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}})
	sa := c.Expect(packet.TypeSuback, 1).(*packet.Suback)
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
			p, ok := c.Next(time.Hour)
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
		if p.QoS == packet.QoS0 || p.QoS == packet.QoS1 || !s.pending[p.PacketID] {
			s.payload[d.Payload] = true
		}
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
		_ = c.TrySend(reply)
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
	if ack := c.Connect(s.connectPacket()); !ack.SessionPresent {
		s.t.Fatalf("%s: session not present on reconnect", s.name)
	}
	s.run(c)
}

func (s *subscriber) connectPacket() *packet.Connect {
	cp := mqtttest.ConnectPacket(s.id, s.v, false)
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
	c.Drop()
	<-stopped
}

// distinct is the number of distinct payloads the subscriber took.
func (s *subscriber) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.payload)
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
