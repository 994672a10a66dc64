package mqttbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// PayloadSize is the size of every benchmark message.
const PayloadSize = 64

// The payload carries a magic, the point's run id, the publisher, a
// sequence number and the time it was sent (nanoseconds since the Unix
// epoch, by the load generator's clock, which the subscriber shares), so
// the subscriber can check every message it gets and time its delivery.
var payloadMagic = [4]byte{'T', 'M', 'B', '1'}

func encodePayload(b []byte, run, pub uint32, seq uint64, sent time.Time) {
	copy(b, payloadMagic[:])
	binary.BigEndian.PutUint32(b[4:], run)
	binary.BigEndian.PutUint32(b[8:], pub)
	binary.BigEndian.PutUint64(b[12:], seq)
	binary.BigEndian.PutUint64(b[20:], uint64(sent.UnixNano()))
}

func decodePayload(b []byte) (run, pub uint32, seq uint64, sent time.Time, ok bool) {
	if len(b) != PayloadSize || [4]byte(b[:4]) != payloadMagic {
		return 0, 0, 0, time.Time{}, false
	}
	sent = time.Unix(0, int64(binary.BigEndian.Uint64(b[20:])))
	return binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint64(b[12:]), sent, true
}

// keepAlive is the keep alive the benchmark's clients announce, in seconds.
const keepAlive = 600

// conn is one MQTT 3.1.1 client connection on package packet.
type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	rd  *packet.Reader
	wmu sync.Mutex
	bw  *bufio.Writer
	w   *packet.Writer
}

// dial connects and completes CONNECT/CONNACK with a clean session. The
// keep alive is long enough that a publisher idling while the subscriber
// drains is not cut off, and no PINGREQ is ever due.
//
// With blocking, the connection is on a blocking socket (see fdConn): for
// loads of few connections, where the poller's round trips would be a
// large part of each exchange's cost on the client side.
func dial(ctx context.Context, addr, clientID string, blocking bool) (*conn, error) {
	var nc net.Conn
	var err error
	if blocking {
		nc, err = dialBlocking(ctx, addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 64<<10)}
	c.rd = packet.NewReader(c.br, 0)
	c.rd.SetVersion(packet.V311)
	c.w = packet.NewWriter(c.bw, packet.V311)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
	if err := c.send(&packet.Connect{CleanStart: true, ClientID: clientID, KeepAlive: keepAlive}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNECT: %w", err)
	}
	p, err := c.rd.ReadPacket()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	}
	ack, ok := p.(*packet.Connack)
	if !ok || ack.ReasonCode != packet.Success {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: got %v", describe(p))
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// send writes p and flushes.
func (c *conn) send(p packet.Packet) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.w.WritePacket(p); err != nil {
		return err
	}
	return c.bw.Flush()
}

// reply queues p (if any) from the read loop, and flushes once nothing
// more is waiting to be read, so acknowledgements go out in batches and
// none is left behind in the buffer.
func (c *conn) reply(p packet.Packet) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if p != nil {
		if err := c.w.WritePacket(p); err != nil {
			return err
		}
	}
	if c.br.Buffered() == 0 && c.bw.Buffered() > 0 {
		return c.bw.Flush()
	}
	return nil
}

// close sends DISCONNECT and closes the connection.
func (c *conn) close() {
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.send(&packet.Disconnect{})
	_ = c.nc.Close()
}

func describe(p packet.Packet) string {
	switch p := p.(type) {
	case nil:
		return "nothing"
	case *packet.Connack:
		return fmt.Sprintf("CONNACK %#x", byte(p.ReasonCode))
	case *packet.Suback:
		return fmt.Sprintf("SUBACK %v", p.ReasonCodes)
	}
	return p.Type().String()
}

// flight is one unacknowledged PUBLISH.
type flight struct {
	seq  uint64
	sent time.Time
	used bool
}

// publisher keeps up to window PUBLISHes in flight on one connection.
//
// With QoS 1 and 2 the goroutine that reads the acknowledgements sends the
// next PUBLISHes itself, in the write that carries its PUBRELs, as a lean
// client does: at window 1 a hand-off to another goroutine per exchange
// would cost the client a scheduler wake-up that the broker is then
// charged for. QoS 0 has no acknowledgement, so its credits come back from
// the subscriber, through the credits channel.
type publisher struct {
	c      *conn
	run    uint32
	idx    uint32
	qos    packet.QoS
	window int
	topic  string

	// credits holds one token per message that may still be sent: all of
	// them at QoS 0, and with QoS 1/2 only the first window and, once
	// stopped, each completion (for drain).
	credits chan struct{}
	// inline: QoS 1/2, whose reader sends the next PUBLISHes (see above).
	inline bool
	// pub is the PUBLISH the writes reuse; c.wmu held.
	pub *packet.Publish
	// stopped ends inline sending: completions go back as credits.
	stopped atomic.Bool

	mu        sync.Mutex
	inflight  []flight // by packet id (QoS 1/2), by seq % window (QoS 0)
	nextPI    uint16
	nextSeq   uint64
	low       uint64    // QoS 0: lowest sequence not yet delivered
	acked     bitset    // QoS 1/2: acknowledged; QoS 0: sent
	done      int       // completed exchanges (QoS 0: delivered)
	from      time.Time // completions before it are the warm-up: not measured
	measured  int       // completed exchanges from from on
	last      time.Time
	hist      histogram
	protoErrs protoErrors
	readErr   error
	dead      chan struct{} // closed when the connection failed
	deadOnce  sync.Once
}

func newPublisher(c *conn, run, idx uint32, qos packet.QoS, window int, topic string) *publisher {
	p := &publisher{c: c, run: run, idx: idx, qos: qos, window: window, topic: topic,
		credits: make(chan struct{}, window), dead: make(chan struct{}), inline: qos != packet.QoS0,
		pub: &packet.Publish{Topic: topic, QoS: qos, Payload: make([]byte, PayloadSize)}}
	if qos == packet.QoS0 {
		p.inflight = make([]flight, window)
	} else {
		p.inflight = make([]flight, 1<<16)
	}
	for range window {
		p.credits <- struct{}{}
	}
	return p
}

// publish sends until stop closes, then waits up to drain for the
// messages still in flight. It returns when both are over.
func (p *publisher) publish(ctx context.Context, stop <-chan struct{}, drain time.Duration) error {
	go p.readAcks()
	if p.inline {
		for range p.window {
			<-p.credits
		}
		if err := p.write(p.window); err != nil {
			return err
		}
		select {
		case <-stop:
			p.stopped.Store(true)
			return p.drain(ctx, drain)
		case <-p.dead:
			return p.err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		select {
		case <-p.credits:
		case <-stop:
			return p.drain(ctx, drain)
		case <-p.dead:
			return p.err()
		case <-ctx.Done():
			return ctx.Err()
		}
		n := 1
	gather:
		for n < p.window {
			select {
			case <-p.credits:
				n++
			default:
				break gather
			}
		}
		if err := p.write(n); err != nil {
			if p.err() != nil {
				return p.err()
			}
			return err
		}
	}
}

// write sends n PUBLISHes in one flush.
func (p *publisher) write(n int) error {
	p.c.wmu.Lock()
	defer p.c.wmu.Unlock()
	if err := p.writeLocked(n); err != nil {
		return err
	}
	return p.c.bw.Flush()
}

// writeLocked buffers n PUBLISHes; c.wmu held.
func (p *publisher) writeLocked(n int) error {
	pub := p.pub
	for range n {
		now := time.Now()
		p.mu.Lock()
		seq := p.nextSeq
		p.nextSeq++
		if p.qos == packet.QoS0 {
			p.inflight[seq%uint64(p.window)] = flight{seq: seq, sent: now, used: true}
		} else {
			for {
				p.nextPI++
				if p.nextPI != 0 && !p.inflight[p.nextPI].used {
					break
				}
			}
			pub.PacketID = p.nextPI
			p.inflight[p.nextPI] = flight{seq: seq, sent: now, used: true}
		}
		p.mu.Unlock()
		encodePayload(pub.Payload, p.run, p.idx, seq, now)
		if err := p.c.w.WritePacket(pub); err != nil {
			return err
		}
		if p.qos == packet.QoS0 {
			p.mu.Lock()
			p.acked.set(seq)
			p.mu.Unlock()
		}
	}
	return nil
}

// readAcks completes exchanges as PUBACK and PUBCOMP arrive, answers
// PUBREC with PUBREL and, inline, sends a PUBLISH per completion; what it
// writes goes out in one flush once nothing more is waiting to be read.
func (p *publisher) readAcks() {
	freed := 0
	for {
		pk, err := p.c.rd.ReadPacket()
		if err != nil {
			p.fail(err)
			return
		}
		var reply packet.Packet
		switch pk := pk.(type) {
		case *packet.Puback:
			if p.complete(pk.PacketID, packet.QoS1) {
				freed++
			}
		case *packet.Pubcomp:
			if p.complete(pk.PacketID, packet.QoS2) {
				freed++
			}
		case *packet.Pubrec:
			if !p.pending(pk.PacketID, packet.QoS2) {
				p.protoError("a PUBREC for packet id %d, which no QoS 2 PUBLISH in flight has", pk.PacketID)
			}
			reply = &packet.Pubrel{PacketID: pk.PacketID}
		default:
			p.protoError("a %s sent to a publisher", describe(pk))
		}
		if p.inline && freed > 0 && !p.stopped.Load() {
			err = p.replyAndPublish(reply, &freed)
		} else {
			err = p.c.reply(reply)
		}
		if err != nil {
			p.fail(err)
			return
		}
		for ; freed > 0 && (!p.inline || p.stopped.Load()); freed-- {
			select {
			case p.credits <- struct{}{}:
			default: // full: drain is awake anyway
			}
		}
	}
}

// replyAndPublish is reply, with *freed new PUBLISHes in the same write
// once nothing more is waiting to be read.
func (p *publisher) replyAndPublish(reply packet.Packet, freed *int) error {
	c := p.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if reply != nil {
		if err := c.w.WritePacket(reply); err != nil {
			return err
		}
	}
	if c.br.Buffered() > 0 {
		return nil
	}
	n := *freed
	*freed = 0
	if err := p.writeLocked(n); err != nil {
		return err
	}
	return c.bw.Flush()
}

func (p *publisher) pending(pi uint16, qos packet.QoS) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.qos == qos && p.inflight[pi].used
}

// measure counts an exchange sent at sent and completed at at, unless it
// completed during the warm-up; p.mu held.
func (p *publisher) measure(at, sent time.Time) {
	if at.Before(p.from) {
		return
	}
	p.hist.add(at.Sub(sent))
	p.measured++
	p.last = at
}

// complete ends the exchange of packet id pi and reports whether it was
// one in flight (its window slot is free again).
func (p *publisher) complete(pi uint16, qos packet.QoS) bool {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := &p.inflight[pi]
	if p.qos != qos || !f.used {
		p.protoErrs.add("a QoS %d acknowledgement for packet id %d, which no QoS %d PUBLISH in flight has", qos, pi, qos)
		return false
	}
	f.used = false
	p.acked.set(f.seq)
	p.done++
	p.measure(now, f.sent)
	return true
}

// delivered is the subscriber telling a QoS 0 publisher that seq arrived:
// it and every earlier message leave the window (an earlier one that never
// arrives was dropped, and must not hold its credit forever).
func (p *publisher) delivered(seq uint64, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq < p.low || seq >= p.nextSeq {
		return
	}
	if f := p.inflight[seq%uint64(p.window)]; f.used && f.seq == seq {
		p.done++
		p.measure(at, f.sent)
	}
	for ; p.low <= seq; p.low++ {
		p.inflight[p.low%uint64(p.window)].used = false
		select {
		case p.credits <- struct{}{}:
		default:
		}
	}
}

// drain waits until nothing is in flight, at most d.
func (p *publisher) drain(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for p.outstanding() > 0 {
		select {
		case <-p.credits:
		case <-t.C:
			return nil
		case <-p.dead:
			return p.err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (p *publisher) outstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.qos == packet.QoS0 {
		return int(p.nextSeq - p.low)
	}
	return int(p.nextSeq) - p.done
}

func (p *publisher) protoError(format string, args ...any) {
	p.mu.Lock()
	p.protoErrs.add(format, args...)
	p.mu.Unlock()
}

func (p *publisher) fail(err error) {
	p.mu.Lock()
	if p.readErr == nil {
		p.readErr = err
	}
	p.mu.Unlock()
	p.deadOnce.Do(func() { close(p.dead) })
}

func (p *publisher) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readErr
}
