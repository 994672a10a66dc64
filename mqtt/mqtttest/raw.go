package mqtttest

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Raw is a client connection at the packet level, built on the broker's
// own codec, for the exchanges a client library hides: a burst sent
// without reading, a duplicate PUBREL, a withheld acknowledgement, bytes
// that are not a valid packet, a TCP connection dropped at any point.
//
// From the first call that reads (Next, Read, Closed, Done, ...) a reader
// goroutine queues every packet the broker sends, in order, so a test
// reads them one by one and can also assert that nothing (more) arrived.
// Until then nothing is read from the socket: a test can play a client
// that is busy writing, or read the raw bytes itself through Conn. The
// reader decodes at the protocol level of the client (DialRaw's, or that
// of the last CONNECT sent before it started). Every wait is bounded: a
// read that must succeed fails the test after Wait. Methods are safe for
// use by one reading and any number of sending goroutines.
type Raw struct {
	t    TB
	name string
	v    packet.Version
	nc   net.Conn

	// Wait bounds the waits for something that must happen (Read,
	// Expect, ExpectClose, Closed by the broker); generous, since tests
	// share the machine. Set it before the first read.
	Wait time.Duration

	wmu     sync.Mutex
	in      chan packet.Packet
	reading sync.Once

	done     chan struct{} // closed when the reader ends
	endErr   error         // why it ended; read after done
	closedAt time.Time     // when it ended; read after done
}

// RawWait is a Raw's default Wait.
const RawWait = 15 * time.Second

// rawQueue is how many packets a Raw holds unread before it gives up and
// closes the connection: a test that stops reading fails loudly instead
// of stalling the broker's writes to it.
const rawQueue = 1 << 16

// DialRaw connects to addr and decodes what the broker sends as protocol
// level v (the level of the CONNECT the test will send). name labels the
// client in failures. The connection closes when the test ends.
func DialRaw(t TB, name, addr string, v packet.Version) *Raw {
	t.Helper()
	c, err := TryDialRaw(t, name, addr, v)
	if err != nil {
		t.Fatalf("%s: dial %s: %v", name, addr, err)
	}
	return c
}

// TryDialRaw is DialRaw that returns the dial error instead of failing.
func TryDialRaw(t TB, name, addr string, v packet.Version) (*Raw, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &Raw{t: t, name: name, v: v, nc: nc, Wait: RawWait, in: make(chan packet.Packet, rawQueue), done: make(chan struct{})}
	t.Cleanup(func() { _ = c.nc.Close() })
	return c, nil
}

// ConnectRaw dials addr, sends cp and returns the client and the CONNACK,
// which must accept; the client decodes at cp's protocol level.
func ConnectRaw(t TB, name, addr string, cp *packet.Connect) (*Raw, *packet.Connack) {
	t.Helper()
	v := cp.Version
	if v == 0 {
		v = packet.V311
	}
	c := DialRaw(t, name, addr, v)
	return c, c.Connect(cp)
}

// ConnectPacket builds a CONNECT with a keep-alive of 60 s. A persistent
// session (clean false) gets a session expiry that never ends under 5.0,
// as 3.1.1 sessions have.
func ConnectPacket(id string, v packet.Version, clean bool) *packet.Connect {
	cp := &packet.Connect{Version: v, ClientID: id, CleanStart: clean, KeepAlive: 60}
	if v == packet.V5 && !clean {
		cp.Properties.SetSessionExpiry(0xFFFFFFFF)
	}
	return cp
}

// read starts the reader once; every method that looks at what the
// broker sent calls it first.
func (c *Raw) read() {
	c.reading.Do(func() {
		c.wmu.Lock() // orders the level with a CONNECT being sent
		v := c.v
		c.wmu.Unlock()
		go c.readLoop(v)
	})
}

func (c *Raw) readLoop(v packet.Version) {
	defer close(c.done)
	rd := packet.NewReader(c.nc, packet.MaxPacketSize)
	rd.SetVersion(v)
	for {
		p, err := rd.ReadPacket()
		if err != nil {
			c.endErr, c.closedAt = err, time.Now()
			return
		}
		if pub, ok := p.(*packet.Publish); ok {
			p = ClonePublish(pub)
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

// ClonePublish copies a PUBLISH out of its Reader's buffer.
func ClonePublish(p *packet.Publish) *packet.Publish {
	q := &packet.Publish{Topic: p.Topic, PacketID: p.PacketID, QoS: p.QoS, Retain: p.Retain, Dup: p.Dup,
		Properties: p.Properties, Payload: slices.Clone(p.Payload)}
	q.Properties.User = slices.Clone(p.Properties.User)
	q.Properties.SubscriptionIDs = slices.Clone(p.Properties.SubscriptionIDs)
	q.Properties.CorrelationData = slices.Clone(p.Properties.CorrelationData)
	return q
}

// Conn is the client's TCP connection, for tests that shape it (socket
// options, half-closes).
func (c *Raw) Conn() net.Conn { return c.nc }

// Connect sends cp at the client's protocol level and returns the
// CONNACK, which must accept.
func (c *Raw) Connect(cp *packet.Connect) *packet.Connack {
	c.t.Helper()
	ack, err := c.TryConnect(cp)
	if err != nil {
		c.t.Fatalf("%s: connect: %v", c.name, err)
	}
	return ack
}

// TryConnect is Connect that returns what went wrong instead of failing:
// the send failed, no CONNACK came within Wait, another packet came, or
// the CONNACK refused.
func (c *Raw) TryConnect(cp *packet.Connect) (*packet.Connack, error) {
	cp.Version = c.v
	if err := c.TrySend(cp); err != nil {
		return nil, err
	}
	p, ok := c.Next(c.Wait)
	if !ok {
		return nil, fmt.Errorf("no CONNACK within %v (connection: %s)", c.Wait, c.State())
	}
	ack, isAck := p.(*packet.Connack)
	if !isAck {
		return nil, fmt.Errorf("got %s, want CONNACK", Describe(p))
	}
	if ack.ReasonCode.IsError() {
		return ack, fmt.Errorf("CONNACK refused: %v", ack.ReasonCode)
	}
	return ack, nil
}

// Send writes the packets in one write, in order, or fails the test.
func (c *Raw) Send(ps ...packet.Packet) {
	c.t.Helper()
	if err := c.TrySend(ps...); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
}

// TrySend is Send that returns the error (the broker may have closed).
func (c *Raw) TrySend(ps ...packet.Packet) error {
	c.wmu.Lock()
	var b []byte
	for _, p := range ps {
		if cp, ok := p.(*packet.Connect); ok && cp.Version != 0 {
			c.v = cp.Version // read by the reader when it starts
		}
		var err error
		if b, err = p.Append(b, c.v); err != nil {
			c.wmu.Unlock()
			return fmt.Errorf("encode %s: %w", Describe(p), err)
		}
	}
	c.wmu.Unlock()
	return c.TrySendBytes(b)
}

// SendBytes writes b as it is (a malformed packet, a packet cut short),
// or fails the test.
func (c *Raw) SendBytes(b []byte) {
	c.t.Helper()
	if err := c.TrySendBytes(b); err != nil {
		c.t.Fatalf("%s: send: %v", c.name, err)
	}
}

// TrySendBytes is SendBytes that returns the error.
func (c *Raw) TrySendBytes(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.Wait))
	_, err := c.nc.Write(b)
	return err
}

// Next returns the next packet within d; false when none came (or the
// connection ended with nothing queued).
func (c *Raw) Next(d time.Duration) (packet.Packet, bool) {
	c.read()
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

// Read returns the next packet or fails the test; what names the packet
// awaited in the failure.
func (c *Raw) Read(what string) packet.Packet {
	c.t.Helper()
	p, ok := c.Next(c.Wait)
	if !ok {
		c.t.Fatalf("%s: no %s within %v (connection: %s)", c.name, what, c.Wait, c.State())
	}
	return p
}

// ReadPublish returns the next packet, which must be a PUBLISH.
func (c *Raw) ReadPublish() *packet.Publish {
	c.t.Helper()
	p := c.Read("PUBLISH")
	pub, ok := p.(*packet.Publish)
	if !ok {
		c.t.Fatalf("%s: got %s, want PUBLISH", c.name, Describe(p))
	}
	return pub
}

// State says whether the connection is open, or why it ended.
func (c *Raw) State() string {
	c.read()
	select {
	case <-c.done:
		return fmt.Sprintf("closed: %v", c.endErr)
	default:
		return "open"
	}
}

// Expect reads the next packet and checks it is of type want with packet
// identifier pi (0: any); it returns the packet.
func (c *Raw) Expect(want packet.Type, pi uint16) packet.Packet {
	c.t.Helper()
	p := c.Read(want.String())
	if p.Type() != want || (pi != 0 && PacketID(p) != pi) {
		c.t.Fatalf("%s: got %s, want %v %d", c.name, Describe(p), want, pi)
	}
	return p
}

// Ack names an expected response by type and packet identifier.
type Ack struct {
	Type     packet.Type
	PacketID uint16
}

// ExpectSeq reads len(want) packets and checks they are exactly want
// (type and packet identifier), in order.
func (c *Raw) ExpectSeq(want ...Ack) {
	c.t.Helper()
	for i, w := range want {
		p := c.Read(fmt.Sprintf("response %d of %d (%v %d)", i+1, len(want), w.Type, w.PacketID))
		if p.Type() != w.Type || PacketID(p) != w.PacketID {
			c.t.Fatalf("%s: response %d of %d is %s, want %v %d", c.name, i+1, len(want), Describe(p), w.Type, w.PacketID)
		}
	}
}

// Silence checks that nothing arrives within d.
func (c *Raw) Silence(d time.Duration) {
	c.t.Helper()
	if p, ok := c.Next(d); ok {
		c.t.Fatalf("%s: unexpected %s", c.name, Describe(p))
	}
}

// Closed reports whether the broker closed the connection within d; the
// packets it sent before are still queued.
func (c *Raw) Closed(d time.Duration) bool {
	c.read()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-c.done:
		return true
	case <-tm.C:
		return false
	}
}

// Done is closed when the connection has ended (closed by either side)
// and its reader has queued the last packet.
func (c *Raw) Done() <-chan struct{} {
	c.read()
	return c.done
}

// Err is why the connection ended (io.EOF for an orderly close by the
// broker); nil while it is open.
func (c *Raw) Err() error {
	c.read()
	select {
	case <-c.done:
		return c.endErr
	default:
		return nil
	}
}

// ClosedAt is when the connection ended; zero while it is open.
func (c *Raw) ClosedAt() time.Time {
	c.read()
	select {
	case <-c.done:
		return c.closedAt
	default:
		return time.Time{}
	}
}

// ExpectClose waits until the broker closes the connection, skipping
// what it sends before, and returns the reason code of the DISCONNECT it
// sent (-1 for none). It fails the test if the connection stays open for
// Wait.
func (c *Raw) ExpectClose() int {
	c.t.Helper()
	if !c.Closed(c.Wait) {
		c.t.Fatalf("%s: the broker did not close the connection within %v", c.name, c.Wait)
	}
	rc := -1
	for _, p := range c.Drain() {
		if d, ok := p.(*packet.Disconnect); ok {
			rc = int(d.ReasonCode)
		}
	}
	return rc
}

// Drop ends the TCP connection abruptly, without DISCONNECT.
func (c *Raw) Drop() {
	if tc, ok := c.nc.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.nc.Close()
	<-c.Done()
}

// Disconnect sends DISCONNECT and closes.
func (c *Raw) Disconnect() {
	_ = c.TrySend(&packet.Disconnect{})
	_ = c.nc.Close()
	<-c.Done()
}

// Drain returns every packet queued now.
func (c *Raw) Drain() []packet.Packet {
	c.read()
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

// PacketID is p's packet identifier, 0 for a packet without one.
func PacketID(p packet.Packet) uint16 {
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

// ReasonOf is the reason code of an acknowledgement, CONNACK or
// DISCONNECT; 0 for other packets.
func ReasonOf(p packet.Packet) packet.ReasonCode {
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

// Describe is a one-line account of p for failure messages.
func Describe(p packet.Packet) string {
	if p == nil {
		return "nothing"
	}
	switch q := p.(type) {
	case *packet.Publish:
		return fmt.Sprintf("PUBLISH{pi %d qos %d dup %v retain %v %s %q}", q.PacketID, q.QoS, q.Dup, q.Retain, q.Topic, q.Payload)
	case *packet.Disconnect:
		return fmt.Sprintf("DISCONNECT{%v}", q.ReasonCode)
	}
	if pi := PacketID(p); pi != 0 {
		return fmt.Sprintf("%v{pi %d rc %v}", p.Type(), pi, ReasonOf(p))
	}
	return p.Type().String()
}
