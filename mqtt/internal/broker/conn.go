package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/ackqueue"
	"github.com/tidemark-io/tidemark/mqtt/internal/admit"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/internal/topicalias"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// errGroupFailed reports that the read loop's pending group could not be
// submitted; the connection is ending.
var errGroupFailed = errors.New("mqtt: pending commit failed")

// conn is one client connection. The read loop owns the inbound QoS 2
// exchange map and the alias table; the ack loop owns the order of
// acknowledgements; writes from any goroutine go through write.
type conn struct {
	b   *Broker
	nc  net.Conn
	rd  *packet.Reader
	br  *netio.Reader // rd's buffer
	log connLog

	wmu   sync.Mutex
	armed time.Time // when armWriteLocked last set the write deadline
	// unflushed says the read loop wrote acknowledgements itself (see
	// pushOwn) that its next wait for input must flush first. Read loop
	// only.
	unflushed bool
	// pumpDue says the read loop committed messages that completed at
	// once (see table.DB.Pump). Read loop only.
	pumpDue bool
	// rate paces the client's PUBLISHes (Options.MaxPublishRate); nil
	// until its first. Read loop only.
	rate *rate.Limiter

	bw       *netio.Writer
	w        *packet.Writer
	nwriters atomic.Int32

	version packet.Version
	client  string
	// db is the partition of the store holding the client's state (see
	// partitions.go), set once the client id is known.
	db        *table.DB
	id        auth.Identity // who the client authenticated as
	keepAlive time.Duration

	ctx    context.Context
	cancel context.CancelFunc

	acks *ackqueue.Queue[ackEntry]
	// inQoS1 counts QoS 1 PUBLISHes whose PUBACK is not sent yet.
	inQoS1 atomic.Int32

	exchanges map[uint16]*exchange
	copies    int
	copyBytes int
	// pendingQoS2 counts inbound QoS 2 exchanges not yet released.
	pendingQoS2 int
	// stagedBefore holds the packet ids with a message staged when the
	// connection began (by an earlier connection of the session).
	stagedBefore map[uint16]bool
	// rowless says the session holds no row of this connection's inbound
	// side and none of the outbound one it began with: it began with none
	// (a new session, or a present one found with none) and staged no
	// inbound QoS 2 message since (see session.Record.Rowless).
	rowless bool
	grp     group // writes of the packets read so far, not yet submitted
	// grpSize is the size of the last group's transaction, unchecked
	// ([0]) and checked ([1]), which the next one is sized as.
	grpSize [2]groupSize
	// encs holds the stored forms of the pending group's QoS 1 messages
	// (see encodeLater): one buffer from encBufs, back there once the
	// group is submitted, instead of an allocation per message.
	encs    *[]byte
	aliases map[uint16]string
	// aliasMax is the 5.0 client's Topic Alias Maximum: how many topic
	// aliases the broker may use towards it (see topicalias.Out).
	aliasMax   uint16
	outAliases topicalias.Out

	rec       session.Record
	expiry    uint32
	will      *Message
	willDelay uint32
	// willExpiry is the will's message expiry interval (0: none); it
	// counts from the will's publication, so Expires is set at teardown.
	willExpiry uint32
	sendWill   bool

	out *delivery.Session
	// pk parks the connection while it waits for input; nil where it
	// cannot (see parking).
	pk *parking
	// waited is when the read loop last went to wait for input: input
	// that comes sooner than parkGrace after the one before says the
	// client is in the middle of an exchange (see parkGrace).
	waited time.Time

	failOnce   sync.Once
	failErr    error
	takenOver  atomic.Bool
	done       chan struct{}
	registered bool
	// tcpKeepAlive says the socket has TCP keep-alive on from the start
	// (see netio.ListenerKeepsAlive).
	tcpKeepAlive bool
	// connacked is set once the CONNACK is written, and connackSent
	// closed: until then nothing but the acknowledgements queued behind
	// it may be sent.
	connacked   atomic.Bool
	connackSent chan struct{}
	// pendingConnack is the CONNACK left to the commit of the SUBSCRIBE
	// behind the CONNECT (read loop only; see subscribeFollows).
	pendingConnack *ackEntry
	// connectHead is the log head the CONNECT read, with the SUBSCRIBE
	// behind it already received; that SUBSCRIBE's subscriptions start
	// there (see handleSubscribe). Valid while pendingConnack is set.
	connectHead logpos.Vec

	// token names this connection in the session record; handoff is the
	// token of a connection on another node that claimed the session.
	token   string
	handoff atomic.Pointer[string]

	// sock is the socket as the broker's gate admits it.
	sock admit.Socket
	// lingering is set when the connection ends after telling the client
	// why: the socket is half-closed and serve drains it before closing.
	lingering atomic.Bool
}

// exchange is the read loop's view of one inbound QoS 2 packet id.
type exchange struct {
	released bool
	msg      *Message // first accepted copy; nil past the copy caps
	enc      []byte   // with msg: its stored form, the bytes staged, which msg's payload aliases
	size     int      // len(enc), against the copy caps
	slot     string   // the staging slot's id
	version  uint64   // the staging commit's table version
	h        *engine.Handle
	redo     *redo // the staging's group, when it held others
}

// releasedExchange stands for every released packet id: it carries
// nothing else, and nothing writes to it, so one value serves them all.
var releasedExchange = &exchange{released: true}

// Copy caps per connection (the store stays the source of truth past them).
const (
	maxCopies    = 1024
	maxCopyBytes = 4 << 20
)

// ackEntry is one acknowledgement in a connection's FIFO: it is sent once
// h (if any) completed, after after (if any) judged the outcome; then then
// runs.
type ackEntry struct {
	pkt packet.Packet
	// ack, when pkt is nil, is the type of a success acknowledgement of
	// packet id pi to write (see packet.Writer.WriteAck): no packet value
	// is built for the common case.
	ack packet.Type
	h   *engine.Handle
	// redo, when set, is the checked group whose part the entry waits
	// for: a failed check of the group's commit gives the entry the
	// outcome of its part committed alone (see redo.outcome), before
	// after judges it.
	redo  *redo
	part  int32
	after func(error) error
	then  func()
	// notify, when set, is told what tooLarge and then are, after them
	// (see delivery.Notified).
	notify delivery.Notified
	qos1   bool
	// tooLarge, when set, runs instead of ending the loop when pkt is over
	// the client's maximum packet size (an outbound PUBLISH).
	tooLarge func()

	// For Hooks: the commit's kind, the packet id, and the points reached
	// once the commit is done and once pkt is sent.
	kind           Kind
	pi             uint16
	atDone, atSent Point
}

// newConn returns a connection for a socket that has not sent its CONNECT
// yet. It holds what reading the CONNECT needs and nothing more: a small
// read buffer, an unbuffered writer for a refusing CONNACK, and none of the
// connected state (see grow), so a flood of idle sockets costs little.
func newConn(b *Broker, nc net.Conn) *conn {
	br := netio.NewReader(nc)
	c := &conn{
		b: b, nc: nc, sock: admit.Socket{Conn: nc},
		rd: packet.NewReader(br, b.opts.MaxPacketSize), br: br,
		w: packet.NewWriter(nc, packet.V311),
	}
	c.log = connLog{c}
	return c
}

// grow allocates what a connection needs once its CONNECT was read: the
// buffered writer, the context, the ack FIFO and the per-connection maps.
// The reader and the writer take large buffers from a pool only while
// there is traffic (see netio.Reader and netio.Writer).
func (c *conn) grow() {
	c.bw = netio.NewWriter(c.nc)
	c.bw.SetSocket(nil, c) // the plain socket is known once parking has it
	c.w = packet.NewWriter(c.bw, packet.V311)
	// The read loop is done with a packet before it reads the next, so
	// acknowledgements from the client cost no allocation each.
	c.rd.SetReuseAcks(true)
	ctx, cancel := context.WithCancel(c.b.ctx)
	// The end of the context resumes a parked connection, whose read loop
	// then ends it: cancel wakes it here, and the broker's Close wakes
	// the ones the end of its own context reached (see Broker.Close), so
	// no context.AfterFunc registration (some 400 bytes per connection
	// in the heap, with a map) is needed.
	c.ctx, c.cancel = ctx, func() {
		cancel()
		if c.pk != nil {
			c.pk.Ready()
		}
	}
	// With the entry the ack loop waits for, the FIFO holds one receive
	// maximum of entries: past it the read loop stops reading the socket
	// until the oldest commit completes.
	c.acks = ackqueue.New[ackEntry](c.b.opts.ReceiveMaximum-1, c.ackLoop, c.b.runners.Go)
	c.exchanges = map[uint16]*exchange{}
	c.done = make(chan struct{})
	c.connackSent = make(chan struct{})
	c.token = newToken()
}

// write sends p, flushing when no other writer is waiting behind it.
func (c *conn) write(p packet.Packet) error {
	return c.writePacket(p, true)
}

// writeBuffered adds p to the write buffer without flushing it: for a
// loop with more packets ready behind p, which must call flush before it
// waits for anything.
func (c *conn) writeBuffered(p packet.Packet) error {
	return c.writePacket(p, false)
}

// writePacket writes p, and flushes when flush says so and no writer
// waits behind. A failed write ends the connection, after the write lock
// is let go: ending it may take that lock (failTold flushes what is
// buffered), and another goroutine may be ending it already, holding the
// connection's failOnce while it waits for the lock.
func (c *conn) writePacket(p packet.Packet, flush bool) error {
	c.nwriters.Add(1)
	c.wmu.Lock()
	if c.bw == nil {
		c.armWriteLocked() // before grow, packets go to the socket unbuffered
	}
	err := c.encodeLocked(p)
	if c.nwriters.Add(-1) == 0 && flush {
		if ferr := c.flushLocked(); err == nil {
			err = ferr
		}
	}
	c.wmu.Unlock()
	if err != nil && !errors.Is(err, packet.ErrPacketTooLarge) {
		c.fail(fmt.Errorf("write: %w", err))
	}
	return err
}

// encodeLocked adds p to the write buffer (a packet larger than the
// buffer goes to the socket at once); wmu is held.
func (c *conn) encodeLocked(p packet.Packet) error {
	err := c.w.WritePacket(p)
	if pub, ok := p.(*packet.Publish); ok && err == nil && pub.Topic != "" && pub.Properties.Has(packet.PropTopicAlias) {
		c.outAliases.Written(pub.Topic)
	}
	return err
}

// writeAck is writeBuffered of a success acknowledgement (see
// packet.Writer.WriteAck).
func (c *conn) writeAck(t packet.Type, id uint16) error {
	c.nwriters.Add(1)
	c.wmu.Lock()
	err := c.w.WriteAck(t, id)
	c.nwriters.Add(-1)
	c.wmu.Unlock() // before fail, as in writePacket
	if err != nil {
		c.fail(fmt.Errorf("write: %w", err))
	}
	return err
}

// flush sends what writeBuffered left in the buffer.
func (c *conn) flush() {
	c.wmu.Lock()
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		c.fail(fmt.Errorf("write: %w", err))
	}
}

func (c *conn) flushLocked() error {
	if c.bw == nil || c.bw.Buffered() == 0 {
		return nil
	}
	return c.bw.Flush()
}

// WillWait runs before a write of the connection's buffered writer that
// may wait for room in the socket (see netio.Writer.SetSocket); wmu is
// held.
func (c *conn) WillWait() { c.armWriteLocked() }

// armWriteLocked keeps the socket's write deadline at least three
// quarters of the store timeout away: a client that stops reading fails
// its connection, one that reads slowly does not, and a write after a
// quiet spell never meets a deadline that passed in the meantime. It runs
// only before writes that may wait, so a connection whose socket always
// has room has no deadline set, and no timer in the runtime's heaps: with
// one per connection set up in the last store timeout, every scan of
// those heaps walked tens of thousands of them in a connect storm.
func (c *conn) armWriteLocked() {
	now := time.Now()
	if now.Sub(c.armed) < c.b.opts.StoreTimeout/4 {
		return
	}
	_ = c.nc.SetWriteDeadline(now.Add(c.b.opts.StoreTimeout))
	c.armed = now
}

// warn logs a failure of this connection's work; once the connection is
// ending, failures are its consequences (a cancelled commit) and go to
// debug.
func (c *conn) warn(msg string, err error) {
	if c.ctx.Err() != nil {
		c.log.Debug(msg, "err", err)
		return
	}
	c.log.Warn(msg, "err", err)
}

// fail ends the connection without a DISCONNECT.
func (c *conn) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		if c.cancel != nil {
			c.cancel()
		}
		_ = c.nc.Close()
	})
}

// disconnect ends the connection, telling a 5.0 client why.
func (c *conn) disconnect(rc packet.ReasonCode, why string) {
	err := fmt.Errorf("disconnected: %s (%v)", why, rc)
	if !c.connacked.Load() && c.connackSent != nil {
		// A CONNACK waiting in the FIFO for its commit goes first: the
		// client hears nothing before it.
		t := time.NewTimer(c.b.opts.StoreTimeout)
		select {
		case <-c.connackSent:
			c.flush()
		case <-c.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if c.version != packet.V5 || !c.connacked.Load() {
		c.fail(err)
		return
	}
	d := &packet.Disconnect{ReasonCode: rc}
	if why != "" {
		d.Properties.SetReasonString(why)
	}
	werr := c.write(d)
	if errors.Is(werr, packet.ErrPacketTooLarge) {
		// Over the client's maximum packet size: the reason code alone
		// [MQTT-3.14.2-3].
		werr = c.write(&packet.Disconnect{ReasonCode: rc})
	}
	if werr != nil {
		c.fail(err)
		return
	}
	c.failTold(err)
}

// shutdown ends the connection as the broker stops.
func (c *conn) shutdown() {
	c.disconnect(packet.ServerShuttingDown, "server shutting down")
	<-c.done
}

// takeover ends the connection because its client id connected again, and
// waits until its session state is persisted.
func (c *conn) takeover() {
	c.takenOver.Store(true)
	c.disconnect(packet.SessionTakenOver, "session taken over")
	<-c.done
}

// serve reads the CONNECT and runs the connection. Its goroutine, or the
// one a parked connection resumes on (see parking), ends the connection.
func (c *conn) serve() {
	cp := c.readConnect()
	if cp == nil {
		c.closeSocket()
		c.released()
		return
	}
	c.grow()
	// Before connect registers the connection: a publisher writing to it
	// in passing (sendNow) reads pk.
	c.pk = newParking(c)
	if c.pk != nil {
		c.bw.SetSocket(c.pk.rc, c)
		// A parking connection lets go of its FIFO's array as it parks
		// (Shrink), so one that stays busy may keep a burst's.
		c.acks.KeepOnDrain(maxKeptAcks)
	}
	if !c.connect(cp) {
		c.failTold(errors.New("connect refused"))
		c.end()
		return
	}
	c.run(false)
}

// readConnect reads the connection's first packet: its CONNECT, or nil
// when the connection ends without one.
func (c *conn) readConnect() *packet.Connect {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.b.opts.ConnectTimeout))
	p, err := c.rd.ReadPacket()
	if !c.b.gate.Connected(&c.sock) {
		return nil // evicted to make room, or the broker is closing
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.b.metrics.Refused(counters.RefusedTimeout)
		}
		c.rejectConnect(err)
		return nil
	}
	cp, _ := p.(*packet.Connect)
	return cp
}

// run runs the read loop until the connection parks or ends; resumed
// says it resumes a parked one.
func (c *conn) run(resumed bool) {
	if c.readLoop(resumed) {
		return
	}
	c.teardown()
	c.end()
}

// end releases what the connection holds once its session is persisted.
func (c *conn) end() {
	if c.pk != nil {
		c.pk.release()
	}
	c.cancel()
	close(c.done)
	c.closeSocket()
	c.released()
}

// released gives the connection's place back to the gate and the broker.
func (c *conn) released() {
	c.b.gate.Release(&c.sock)
	c.b.wg.Done()
}

// rejectConnect answers a CONNECT that failed to decode, where the protocol
// allows an answer.
func (c *conn) rejectConnect(err error) {
	var pe *packet.Error
	if !errors.As(err, &pe) || pe.Type != packet.TypeConnect {
		return
	}
	v := pe.Version
	if v != packet.V5 {
		v = packet.V311
		if _, ok := packet.ConnackReturnCode311(pe.Code); !ok {
			return
		}
	}
	c.w.SetVersion(v)
	if c.write(&packet.Connack{ReasonCode: pe.Code}) == nil {
		c.failTold(err)
	}
}

// readLoop reads and handles packets until the connection ends (false)
// or parks (true; see parking). resumed enters it where a park left it.
func (c *conn) readLoop(resumed bool) (parkedNow bool) {
	for {
		if !resumed {
			now := time.Now()
			var deadline time.Time
			if c.keepAlive > 0 {
				deadline = now.Add(time.Duration(float64(c.keepAlive) * c.b.opts.KeepAliveGrace))
			}
			if c.pk != nil && c.br.Buffered() == 0 && !c.out.AwaitingAcks() {
				// It leaves the read deadline at deadline when it returns.
				switch c.waitToPark(now, deadline) {
				case waitParked:
					return true
				case waitFailed:
					return false
				}
			} else {
				_ = c.nc.SetReadDeadline(deadline)
			}
			if c.ctx.Err() != nil {
				return false // ended by another goroutine, which may have set a deadline before ours
			}
		}
		resumed = false
		if c.ctx.Err() != nil {
			return false
		}
		p, err := c.rd.ReadPacket()
		if err != nil {
			c.readError(err)
			return false
		}
		if !c.throttle(p) || !c.handle(p) {
			return false
		}
		if c.ctx.Err() != nil {
			return false
		}
		if !c.packetReady() {
			if !c.flushGroup() {
				return false
			}
			if c.unflushed {
				// Acknowledgements sent from here go out before the
				// read loop waits for more input.
				c.unflushed = false
				c.flush()
			}
			if c.pumpDue {
				// Messages this connection committed without waiting
				// reach the subscribers' senders from here, not after
				// the table's follower goroutines are woken.
				c.pumpDue = false
				c.db.Pump()
			}
		}
	}
}

// How long a connection with nothing to read waits for input on its
// goroutine before it parks. One in the middle of an exchange (its last
// input came less than parkGrace after the input before, as a window-1
// publisher's does) waits parkGrace: its next packet usually comes sooner,
// and meets a goroutine already waiting instead of a poller report, a new
// goroutine and a re-arm. Any other parks at once (parkPause). A wait of
// 2 ms there had measured better, when every connection also held a
// write-deadline timer; since those are gone, parking at once costs less
// (`tidemark bench fleet` at 19,000 sessions, three alternating runs:
// 174-180 against 191-201 µs of broker CPU per session set up, 46-55
// against 53-56 per spread delivery, 170-185 against 200-228 per
// reconnect, spread p99 29-38 ms against 32-37), and takes no timer.
const (
	parkGrace = 20 * time.Millisecond
	parkPause = 0
)

// What waitToPark did.
const (
	waitInput  = iota // input came, or the grace would pass the deadline: read on
	waitParked        // the connection parked
	waitFailed        // the connection ended
)

// waitToPark parks the connection whose keep-alive read deadline is
// deadline (zero: none) after it waited parkGrace for input, or at once;
// now is when the read loop came to wait. Unless it parked, it leaves the
// read deadline at deadline. Read loop only.
func (c *conn) waitToPark(now, deadline time.Time) int {
	wait := parkGrace
	if now.Sub(c.waited) >= parkGrace {
		wait = parkPause
	}
	c.waited = now
	until := now.Add(wait)
	if !deadline.IsZero() && !until.Before(deadline) {
		_ = c.nc.SetReadDeadline(deadline)
		return waitInput
	}
	if c.ctx.Err() != nil {
		return waitFailed // ended by another goroutine: no wait
	}
	err := os.ErrDeadlineExceeded // no wait: park at once
	if wait > 0 {
		_ = c.nc.SetReadDeadline(until)
		err = c.br.Wait()
	}
	_ = c.nc.SetReadDeadline(deadline)
	switch {
	case err == nil:
		return waitInput
	case !errors.Is(err, os.ErrDeadlineExceeded):
		// errors.Is, not errors.As into a net.Error: this runs on every
		// park, and the target of As would be an allocation each time.
		c.readError(err)
		return waitFailed
	case c.ctx.Err() != nil:
		return waitFailed
	case c.out.AwaitingAcks():
		return waitInput
	}
	c.rd.ReleaseAcks() // an idle connection holds none
	c.br.Idle()
	c.acks.Shrink()
	c.b.at(PointParked, c.client, 0)
	if !c.pk.park(deadline, c.br.MayHoldMore()) {
		return waitInput
	}
	return waitParked
}

func (c *conn) readError(err error) {
	if c.ctx.Err() != nil || !c.flushConnack() {
		return
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		c.fail(err)
	case errors.As(err, &ne) && ne.Timeout():
		c.disconnect(packet.KeepAliveTimeout, "keep alive timeout")
	default:
		if rc, ok := packet.ReasonCodeOf(err); ok {
			c.log.Debug("bad packet", "client", c.client, "err", err)
			c.disconnect(rc, err.Error())
			return
		}
		c.fail(err)
	}
}

// handle dispatches one packet; false ends the read loop.
func (c *conn) handle(p packet.Packet) bool {
	if _, ok := p.(*packet.Subscribe); !ok && !c.flushConnack() {
		return false
	}
	switch p := p.(type) {
	case *packet.Publish:
		return c.handlePublish(p)
	case *packet.Pubrel:
		return c.handlePubrel(p)
	case *packet.Puback:
		c.out.Puback(p.PacketID)
	case *packet.Pubrec:
		return c.out.Pubrec(p)
	case *packet.Pubcomp:
		c.out.Pubcomp(p.PacketID)
	case *packet.Subscribe:
		return c.handleSubscribe(p)
	case *packet.Unsubscribe:
		return c.handleUnsubscribe(p)
	case *packet.Pingreq:
		if !c.connacked.Load() {
			return c.ack(ackEntry{pkt: &packet.Pingresp{}}) // behind the CONNACK
		}
		return c.write(&packet.Pingresp{}) == nil
	case *packet.Disconnect:
		c.handleDisconnect(p)
		return false
	case *packet.Connect:
		c.disconnect(packet.ProtocolError, "second CONNECT") // [MQTT-3.1.0-2]
		return false
	default:
		c.disconnect(packet.ProtocolError, fmt.Sprintf("unexpected %v", p.Type()))
		return false
	}
	return true
}

func (c *conn) handleDisconnect(p *packet.Disconnect) {
	if c.version == packet.V5 {
		if p.Properties.Has(packet.PropSessionExpiry) {
			if c.expiry == 0 && p.Properties.SessionExpiry != 0 {
				c.disconnect(packet.ProtocolError, "session expiry set on DISCONNECT after 0 on CONNECT") // [MQTT-3.14.2-2]
				return
			}
			c.expiry = c.capExpiry(p.Properties.SessionExpiry)
		}
		c.sendWill = p.ReasonCode == packet.DisconnectWithWillMessage
	} else {
		c.sendWill = false
	}
	// What was read before the DISCONNECT is committed as it would have
	// been without it; the acknowledgements may not reach the client.
	c.flushGroup()
	c.fail(io.EOF)
}

// push queues an acknowledgement, blocking while the FIFO is full (back-
// pressure on the read loop). False means the connection is ending.
func (c *conn) push(e ackEntry) bool {
	if !c.acks.Push(c.ctx, e) {
		return false
	}
	c.b.metrics.PipelineDepth.Add(1)
	return true
}

// ackLoop sends acknowledgements in FIFO order as their commits complete.
// A failed or timed-out commit stops it and the connection: nothing behind
// it is acknowledged, and the client re-sends after reconnecting.
func (c *conn) ackLoop() {
	ended := false
	defer func() {
		if !ended {
			c.acks.Failed()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		e, ok := c.acks.TryPop()
		if !ok {
			// Nothing ready: send the acknowledgements written so far in
			// one flush, then wait.
			c.flush()
			if e, ok = c.acks.PopOrEnd(); !ok {
				ended = true
				return
			}
		}
		c.b.metrics.PipelineDepth.Add(-1)
		if !c.finishAck(e, timer) {
			return
		}
	}
}

// finishAck waits for e's commit and sends its acknowledgement; false
// when the ack loop must end (a failed or timed-out commit, an ended
// connection), having ended the connection as the failure requires.
func (c *conn) finishAck(e ackEntry, timer *time.Timer) bool {
	err, ok, timedOut := c.waitCommit(e, timer)
	if timedOut {
		c.flush()
		c.fail(fmt.Errorf("store did not complete in %v; the client will re-send", c.b.opts.StoreTimeout))
		return false
	}
	if !ok {
		return false
	}
	if e.redo != nil {
		err = e.redo.outcome(c, e.part, err)
	}
	if e.after != nil {
		err = e.after(err)
	}
	if err != nil {
		c.log.Warn("store failed; closing the connection", "client", c.client, "err", err)
		c.flush() // what was acknowledged before the failure still goes out
		if c.b.metrics.StoreFailed(err) {
			// The store cannot write (a full disk): a 5.0 client
			// learns why, and re-sends what went unacknowledged
			// after reconnecting.
			c.disconnect(packet.QuotaExceeded, "the broker's store refuses writes; retry later")
			return false
		}
		c.fail(err)
		return false
	}
	if c.ctx.Err() != nil {
		return false
	}
	if e.atDone != "" {
		c.b.at(e.atDone, c.client, e.pi)
	}
	if e.pkt != nil {
		if err := c.writeBuffered(e.pkt); err != nil {
			if !errors.Is(err, packet.ErrPacketTooLarge) || (e.tooLarge == nil && e.notify == nil) {
				return false
			}
			if e.tooLarge != nil {
				e.tooLarge()
			}
			if e.notify != nil {
				e.notify.TooLarge()
			}
		}
	} else if e.ack != 0 {
		if err := c.writeAck(e.ack, e.pi); err != nil {
			return false
		}
	}
	if e.atSent != "" && c.b.opts.Hooks.At != nil {
		c.flushed()
		c.b.at(e.atSent, c.client, e.pi)
	}
	if e.qos1 {
		c.inQoS1.Add(-1)
	}
	if e.then != nil {
		e.then()
	}
	if e.notify != nil {
		e.notify.Done()
	}
	return true
}
