package mqtt

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// outbound is a session's sending side: its member of the broker's router
// over the message log (fed by the router while the session keeps up; read
// from the log from the session's checkpoint while it catches up), plus a
// queue of in-memory deliveries (QoS 0 publications, shared subscriptions,
// retained messages). QoS 2 deliveries are recorded in tableOut before
// their PUBLISH, and after PUBREC before their PUBREL, so a reconnect or
// restart re-sends PUBREL, never the PUBLISH again.
type outbound struct {
	c      *conn
	window int

	mu   sync.Mutex
	subs []topic.Subscription // the session's subscriptions
	// since holds, per plain subscription filter, the log position it was
	// made at: it matches only messages after it, so a message published
	// before the SUBSCRIBE that the sender reaches later is not delivered
	// (nor delivered twice with its retained copy).
	since map[string]table.Cursor
	// queued counts PUBLISHes waiting in grp or the connection's FIFO.
	queued atomic.Int32
	// grp holds the records of QoS 2 deliveries not yet committed
	// (sender only; see flushGroup).
	grp      group
	inflight map[uint16]*outMsg
	resumed  map[table.Cursor]*outMsg // restored QoS 2 state awaiting its log event
	done     map[table.Cursor]bool    // QoS 2 completed above the checkpoint
	// ending holds the packet ids of ended QoS 2 exchanges whose record
	// delete is held back (see lazyEnds), with their log positions: the
	// ids are not reused and the marks not dropped until it commits.
	ending   map[uint16]table.Cursor
	nextPI   uint16
	sentHigh table.Cursor // the furthest log position ever sent
	// q1ids holds the packet ids of QoS 1 deliveries unacknowledged when
	// the session was last persisted, by log position, for their re-send.
	q1ids map[table.Cursor]uint16
	// liveFrom is the log head when this connection came online: QoS 0
	// deliveries come only from messages after it.
	liveFrom table.Cursor
	freed    chan struct{}

	sub       *table.Member
	direct    directQueue
	persisted table.Cursor
	// progress counts completed QoS 1/2 deliveries; persisted at
	// persistedProgress, at persistedAt.
	progress          atomic.Uint64
	persistedProgress atomic.Uint64
	persistedAt       time.Time
	// persistNow asks the sender for a checkpoint write. A session has no
	// ticker: the first delivery completed after a write arms a timer of
	// Options.CheckpointEvery (armed), a window's worth of them asks at
	// once, so a crash re-sends no more than that, and retention asks an
	// idle session whose checkpoint moved over others' messages (asked).
	// An idle session costs no wake-ups.
	persistNow chan struct{}
	armed      atomic.Bool
	asked      atomic.Bool
	stopped    chan struct{}
}

type outMsg struct {
	pi    uint16
	qos   byte
	ev    table.Event
	hasEv bool
	pos   table.Cursor
	msg   *Message
	rec   bool // a tableOut record exists
	state byte // outSent or outPubrec
}

const (
	outSent   = 1
	outPubrec = 2
)

// outRecord is the stored form of an outbound QoS 2 message in flight.
type outRecord struct {
	PI    uint16       `json:"pi"`
	State byte         `json:"state"`
	Pos   table.Cursor `json:"pos"`
	Msg   []byte       `json:"msg"`
}

// newOutbound restores the sending side of c's session; present says the
// session existed (a new one has no delivery state to read).
func newOutbound(c *conn, window int, present bool) (*outbound, error) {
	o := &outbound{
		c: c, window: window,
		inflight: map[uint16]*outMsg{}, resumed: map[table.Cursor]*outMsg{}, done: map[table.Cursor]bool{},
		ending: map[uint16]table.Cursor{},
		freed:  make(chan struct{}, 1), stopped: make(chan struct{}), persistNow: make(chan struct{}, 1),
		direct:    directQueue{ready: make(chan struct{}, 1)},
		persisted: c.rec.Checkpoint, nextPI: c.rec.NextPI, sentHigh: c.rec.SentHigh,
	}
	for _, s := range c.rec.Subs {
		o.subs = append(o.subs, s.sub(c.client))
		if s.Since != nil {
			o.setSince(s.Filter, *s.Since)
		}
	}
	for _, q := range c.rec.Q1 {
		if o.q1ids == nil {
			o.q1ids = map[table.Cursor]uint16{}
		}
		o.q1ids[q.Pos] = q.PI
	}
	head, herr := c.b.db.Head(c.ctx)
	if herr != nil {
		return nil, herr
	}
	o.liveFrom = head
	if !present {
		return o, nil
	}
	ctx := c.ctx
	db := c.b.db
	err := db.Range(ctx, tableOut, c.client+slotSep, func(r table.Record) bool {
		var or outRecord
		if r.Deleted || json.Unmarshal(r.Value, &or) != nil {
			return true
		}
		var m Message
		if m.UnmarshalBinary(or.Msg) != nil {
			return true
		}
		om := &outMsg{pi: or.PI, qos: 2, pos: or.Pos, msg: &m, rec: true, state: or.State}
		o.inflight[or.PI] = om
		o.resumed[or.Pos] = om
		return true
	})
	if err != nil {
		return nil, err
	}
	err = db.Range(ctx, tableDone, c.client+slotSep, func(r table.Record) bool {
		var cur table.Cursor
		if !r.Deleted && cur.UnmarshalText([]byte(r.ID[len(c.client)+1:])) == nil {
			o.done[cur] = true
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// start re-sends the restored QoS 2 state and starts the sender.
func (o *outbound) start() {
	c := o.c
	// Re-send in the order first sent (log order), not map order: a
	// topic's QoS 2 messages must reach the client in the order they were
	// published [MQTT-4.6.0-6].
	restored := make([]*outMsg, 0, len(o.inflight))
	for _, om := range o.inflight {
		restored = append(restored, om)
	}
	slices.SortFunc(restored, func(a, b *outMsg) int {
		switch {
		case a.pos.Less(b.pos):
			return -1
		case b.pos.Less(a.pos):
			return 1
		}
		return 0
	})
	for _, om := range restored {
		if om.state == outPubrec {
			_ = c.write(&packet.Pubrel{PacketID: om.pi})
		} else {
			// The stored state keeps the message, not how it matched:
			// match it again for its subscription identifiers and retain
			// as published.
			o.mu.Lock()
			_, ids, rap, _ := o.match(om.msg, om.pos)
			o.mu.Unlock()
			_ = c.write(o.publishPacket(om.msg, om.pi, 2, ids, om.msg.Retain && rap, true))
		}
	}
	if err := o.subscribe(c.rec.Checkpoint); err != nil {
		c.log.Error("subscribe to the message log", "err", err)
		c.fail(err)
		close(o.stopped)
		return
	}
	go o.run()
}

// subscribe starts the session's member of the router: it catches up
// from from, then joins the route.
func (o *outbound) subscribe(from table.Cursor) error {
	b := o.c.b
	m := b.fan.Join(from, func(ev table.Event) bool { return o.wants(ev.ID) })
	o.mu.Lock()
	o.sub = m
	o.mu.Unlock()
	b.join(o.c.client, m)
	return nil
}

// skipTruncated moves the member to the oldest retained message after
// retention removed messages the session had not received yet.
func (o *outbound) skipTruncated(cause error) bool {
	c := o.c
	st, err := c.b.db.LogStats(c.ctx)
	if err != nil || st.Floor == 0 {
		return false
	}
	c.log.Warn("retention removed queued messages before the session received them", "err", cause)
	c.b.metrics.droppedRetention.Add(1)
	o.sub.Restart(table.Cursor{Key: st.Floor - 1})
	return true
}

// currentSub returns the session's member of the router.
func (o *outbound) currentSub() *table.Member {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sub
}

// wants reports whether any plain subscription of the session matches.
func (o *outbound) wants(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		if s.Group == "" && topic.Match(s.Filter, name) {
			return true
		}
	}
	return false
}

func (o *outbound) run() {
	defer close(o.stopped)
	c := o.c
	for {
		if !o.waitWindow() {
			return
		}
		ev, ok, err := o.sub.Next(c.ctx)
		if err != nil {
			if errors.Is(err, table.ErrHistoryUnavailable) && o.skipTruncated(err) {
				continue
			}
			if !errors.Is(err, table.ErrClosed) && c.ctx.Err() == nil {
				c.log.Warn("session replay ended", "err", err)
				c.disconnect(packet.UnspecifiedError, "session replay failed")
			}
			return
		}
		if ok {
			o.deliverEvent(ev)
			// In-memory deliveries and checkpoints go on between log
			// messages, however long the log.
			select {
			case <-o.direct.ready:
				o.drainDirect()
			case <-o.persistNow:
				o.checkpoint()
			default:
			}
			continue
		}
		if o.direct.len() == 0 {
			// About to wait: the records taken so far are committed
			// together and the PUBLISHes written so far go out in one
			// flush.
			o.flushGroup()
			c.flush()
		}
		select {
		case <-o.sub.Ready():
		case <-o.direct.ready:
			o.drainDirect()
		case <-o.persistNow:
			o.checkpoint()
		case <-c.ctx.Done():
			return
		}
	}
}

// arm asks for a checkpoint write in Options.CheckpointEvery, unless one
// is asked for already.
func (o *outbound) arm() {
	if o.armed.CompareAndSwap(false, true) {
		time.AfterFunc(o.c.b.opts.CheckpointEvery, func() {
			o.armed.Store(false)
			o.requestPersist()
		})
	}
}

// requestPersist asks the sender for a checkpoint write.
func (o *outbound) requestPersist() {
	select {
	case o.persistNow <- struct{}{}:
	default:
	}
}

// checkpoint persists the acknowledged checkpoint when it moved.
func (o *outbound) checkpoint() {
	if err := o.persist(o.c.ctx, false); err != nil && o.c.ctx.Err() == nil {
		o.c.log.Warn("persist checkpoint", "err", err)
	}
	// Completion marks the write made garbage, and exchange endings held
	// back, go with the next one.
	if o.garbage() || o.c.lazy.pending() {
		o.arm()
	}
}

// drainDirect sends the queued in-memory deliveries, within the window.
func (o *outbound) drainDirect() {
	for o.direct.len() > 0 && o.waitWindow() {
		if d, ok := o.direct.take(); ok {
			o.deliverDirect(d)
		}
	}
}

// waitWindow blocks while the client's receive maximum is reached.
func (o *outbound) waitWindow() bool {
	for {
		o.mu.Lock()
		n := len(o.inflight)
		o.mu.Unlock()
		if n < o.window {
			return true
		}
		o.flushGroup()
		o.c.flush()
		select {
		case <-o.freed:
		case <-o.c.ctx.Done():
			return false
		}
	}
}

// deliverEvent sends one message from the log, or acknowledges it at once
// when nothing is owed to the client.
func (o *outbound) deliverEvent(ev table.Event) {
	pos := ev.Cursor()
	o.mu.Lock()
	if om := o.resumed[pos]; om != nil {
		delete(o.resumed, pos)
		om.ev, om.hasEv = ev, true
		o.mu.Unlock()
		return
	}
	if o.done[pos] {
		o.mu.Unlock()
		_ = o.sub.Ack(ev)
		return
	}
	var m Message
	if err := m.UnmarshalBinary(ev.Value); err != nil {
		o.mu.Unlock()
		o.c.log.Warn("undecodable message in the log skipped", "key", ev.Key, "err", err)
		_ = o.sub.Ack(ev)
		return
	}
	qos, ids, rap, ok := o.match(&m, pos)
	o.mu.Unlock()
	// What the session may no longer read (an ACL reloaded since it
	// subscribed) is passed over like a message it does not match.
	ok = ok && o.c.b.allow(o.c.ctx, o.c.id, AccessRead, m.Topic)
	if ok && qos == 0 && o.liveFrom.Covers(ev.Key, ev.Index) {
		// At most once: a QoS 0 subscription gets no message published
		// before this connection came online, neither what it missed
		// offline nor, after a crash, what an earlier connection may
		// already have sent (no acknowledgement says which).
		_ = o.sub.Ack(ev)
		return
	}
	if !ok || m.Expired(time.Now()) {
		if ok {
			o.c.b.metrics.droppedExpired.Add(1)
		}
		_ = o.sub.Ack(ev)
		return
	}
	o.mu.Lock()
	// Sent before (by an earlier connection): a re-send carries DUP.
	dup := !o.sentHigh.Less(pos)
	if o.sentHigh.Less(pos) {
		o.sentHigh = pos
	}
	o.mu.Unlock()
	o.send(&m, qos, ids, m.Retain && rap, dup, ev, true)
}

// match returns the delivery QoS, subscription identifiers and retain-as-
// published of the session's plain subscriptions matching m, at log
// position pos; o.mu held.
func (o *outbound) match(m *Message, pos table.Cursor) (qos byte, ids []uint32, rap, ok bool) {
	for _, s := range o.subs {
		if s.Group != "" || !topic.Match(s.Filter, m.Topic) || (s.NoLocal && m.From == o.c.client) {
			continue
		}
		if since, ok := o.since[s.Filter]; ok && !since.Less(pos) {
			continue
		}
		ok = true
		qos = max(qos, min(s.QoS, m.QoS))
		if s.ID != 0 {
			ids = append(ids, s.ID)
		}
		rap = rap || s.RetainAsPublished
	}
	return qos, ids, rap, ok
}

func (o *outbound) deliverDirect(d direct) {
	if d.msg.Expired(time.Now()) {
		return
	}
	o.send(d.msg, d.qos, d.ids, d.retain, false, table.Event{}, false)
}

// send writes one PUBLISH; QoS 1/2 ones enter the in-flight window.
func (o *outbound) send(m *Message, qos byte, ids []uint32, retain, dup bool, ev table.Event, hasEv bool) {
	c := o.c
	c.b.metrics.msgsOut[qos].Add(1)
	c.b.metrics.bytesOut.Add(uint64(len(m.Payload)))
	if qos == 0 {
		tooLarge := func() { c.b.metrics.droppedTooLarge.Add(1) }
		var then func()
		if hasEv {
			then = func() { _ = o.sub.Ack(ev) }
		}
		o.deliver(o.publishPacket(m, 0, 0, ids, retain, false), 0, tooLarge, then)
		return
	}
	o.mu.Lock()
	pi, ok := o.q1ids[ev.Cursor()]
	if ok {
		delete(o.q1ids, ev.Cursor())
	}
	if !ok || qos != 1 || !hasEv || pi == 0 || o.inflight[pi] != nil {
		pi = o.allocPI()
	}
	om := &outMsg{pi: pi, qos: qos, ev: ev, hasEv: hasEv, pos: ev.Cursor(), msg: m, state: outSent}
	o.inflight[pi] = om
	o.mu.Unlock()
	c.b.metrics.inflightOut.Add(1)
	p := o.publishPacket(m, pi, qos, ids, retain, dup)
	if qos == 1 {
		// Too large for the client: dropped, as if acknowledged [MQTT-3.1.2-25].
		o.deliver(p, pi, func() { c.b.metrics.droppedTooLarge.Add(1); o.complete(pi) }, nil)
		return
	}
	// Durable before the PUBLISH: a reconnect or restart re-sends it with
	// this id. In-memory deliveries too (shared subscriptions, retained
	// messages): their exchange must also complete after a reconnect
	// [MQTT-4.8.2-3] [MQTT-4.4.0-1].
	if err := o.addRecord(om); err != nil {
		c.warn("record outbound QoS 2", err)
		c.fail(err)
		return
	}
	// Its PUBLISH waits in the group, then in the connection's FIFO, for
	// the commit of the record.
	o.queued.Add(1)
	o.grp.entries = append(o.grp.entries, ackEntry{pkt: p, atSent: PointDelivered, pi: pi,
		tooLarge: func() { c.b.metrics.droppedTooLarge.Add(1); o.finishQoS2(om, true) },
		then:     func() { o.queued.Add(-1) }})
	if len(o.grp.entries) >= o.c.b.group {
		o.flushGroup()
	}
}

// flushGroup submits the records of the QoS 2 deliveries taken since the
// last flush in one commit and queues their PUBLISHes behind it. Sender
// only: it runs before the sender waits for anything and before a
// delivery that does not wait for a commit.
func (o *outbound) flushGroup() {
	if o.grp.tx == nil {
		return
	}
	c := o.c
	tx, entries := o.grp.tx, o.grp.entries
	o.grp.tx, o.grp.entries = nil, o.grp.entries[:0]
	// The subscriber's window keeps other deliveries going meanwhile.
	tx.Defer()
	h, err := tx.Submit(c.ctx)
	if err != nil {
		c.warn("record outbound QoS 2", err)
		c.fail(err)
		return
	}
	for _, e := range entries {
		e.h = h
		if !c.push(e) {
			return
		}
	}
}

// deliver writes a PUBLISH that needs no commit (QoS 0 and 1); tooLarge
// runs instead when p is over the client's maximum packet size, then
// after it.
//
// A QoS 2 PUBLISH waits for the commit of its record, in the sender's
// group and then in the connection's FIFO, so the sender goes on to the
// next message and the records of many deliveries share one commit. While
// any such PUBLISH waits, the others queue behind it: the client sees
// them in the order the sender took them.
func (o *outbound) deliver(p *packet.Publish, pi uint16, tooLarge, after func()) {
	c := o.c
	o.flushGroup()
	if o.queued.Load() == 0 {
		if err := c.writeBuffered(p); errors.Is(err, packet.ErrPacketTooLarge) {
			tooLarge()
		} else if err != nil {
			return
		}
		c.b.at(PointDelivered, c.client, pi)
		if after != nil {
			after()
		}
		return
	}
	o.queued.Add(1)
	c.push(ackEntry{pkt: p, atSent: PointDelivered, pi: pi, tooLarge: tooLarge, then: func() {
		o.queued.Add(-1)
		if after != nil {
			after()
		}
	}})
}

func (o *outbound) allocPI() uint16 {
	for {
		o.nextPI++
		if o.nextPI == 0 {
			o.nextPI = 1
		}
		if _, held := o.ending[o.nextPI]; !held && o.inflight[o.nextPI] == nil {
			return o.nextPI
		}
	}
}

func (o *outbound) publishPacket(m *Message, pi uint16, qos byte, ids []uint32, retain, dup bool) *packet.Publish {
	p := &packet.Publish{Topic: m.Topic, PacketID: pi, QoS: packet.QoS(qos), Retain: retain, Dup: dup && qos > 0, Payload: m.Payload}
	if o.c.version == packet.V5 {
		pp := &p.Properties
		if m.HasFormat {
			pp.SetPayloadFormat(m.PayloadFormat)
		}
		if !m.Expires.IsZero() {
			left := time.Until(m.Expires)
			pp.SetMessageExpiry(uint32(max(left.Round(time.Second), time.Second) / time.Second))
		}
		if m.ContentType != "" {
			pp.SetContentType(m.ContentType)
		}
		if m.ResponseTopic != "" {
			pp.SetResponseTopic(m.ResponseTopic)
		}
		if m.CorrelationData != nil {
			pp.SetCorrelationData(m.CorrelationData)
		}
		for _, u := range m.UserProps {
			pp.AddUser(u.Key, u.Value)
		}
		for _, id := range ids {
			pp.AddSubscriptionID(id)
		}
		o.c.outAliases.apply(p, o.c.aliasMax)
	}
	return p
}

// addRecord writes om's outbound record into the sender's pending group.
func (o *outbound) addRecord(om *outMsg) error {
	enc, err := om.msg.MarshalBinary()
	if err != nil {
		return err
	}
	v, err := json.Marshal(outRecord{PI: om.pi, State: om.state, Pos: om.pos, Msg: enc})
	if err != nil {
		return err
	}
	if o.grp.tx == nil {
		o.grp.tx = o.c.b.db.Begin()
	}
	om.rec = true
	return o.grp.tx.PutStateUnchecked(tableOut, slotID(o.c.client, om.pi), v)
}

func (o *outbound) puback(pi uint16) {
	o.mu.Lock()
	om := o.inflight[pi]
	if om == nil || om.qos != 1 {
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.complete(pi)
}

// complete ends an exchange and acknowledges its log event.
func (o *outbound) complete(pi uint16) {
	o.mu.Lock()
	om := o.inflight[pi]
	delete(o.inflight, pi)
	if om != nil && !om.hasEv {
		// Completed before the replay reached its log entry: that entry
		// is now acknowledged through the done marks, not attached here.
		delete(o.resumed, om.pos)
	}
	o.mu.Unlock()
	if om != nil && om.hasEv {
		if sub := o.currentSub(); sub != nil {
			_ = sub.Ack(om.ev)
		}
	}
	if om != nil {
		o.c.b.metrics.inflightOut.Add(-1)
		// After the Ack: the write asked for covers this delivery.
		if n := o.progress.Add(1); n-o.persistedProgress.Load() >= uint64(max(o.window, 1)) {
			o.requestPersist()
		} else {
			o.arm()
		}
	}
	select {
	case o.freed <- struct{}{}:
	default:
	}
}

// pubrec records the PUBREC durably, then sends PUBREL through the
// connection's ack FIFO.
func (o *outbound) pubrec(p *packet.Pubrec) bool {
	c := o.c
	o.mu.Lock()
	om := o.inflight[p.PacketID]
	o.mu.Unlock()
	if om == nil || om.qos != 2 {
		rel := &packet.Pubrel{PacketID: p.PacketID}
		if c.version == packet.V5 {
			rel.ReasonCode = packet.PacketIdentifierNotFound
		}
		return c.ack(ackEntry{pkt: rel})
	}
	if p.ReasonCode.IsError() {
		return o.finishQoS2(om, false) // the client refused it: the exchange ends [MQTT-4.3.3-4 in 5.0]
	}
	om.state = outPubrec
	if !om.rec {
		return c.ack(ackEntry{pkt: &packet.Pubrel{PacketID: p.PacketID}})
	}
	enc, _ := om.msg.MarshalBinary()
	v, _ := json.Marshal(outRecord{PI: om.pi, State: outPubrec, Pos: om.pos, Msg: enc})
	return c.laterDelivery(func(tx *table.Tx) error { return tx.PutStateUnchecked(tableOut, slotID(c.client, om.pi), v) },
		ackEntry{pkt: &packet.Pubrel{PacketID: p.PacketID}})
}

func (o *outbound) pubcomp(pi uint16) {
	o.mu.Lock()
	om := o.inflight[pi]
	o.mu.Unlock()
	if om == nil || om.qos != 2 || om.state != outPubrec {
		return
	}
	o.finishQoS2(om, false)
}

// finishQoS2 deletes the outbound record and marks the message done above
// the checkpoint in one commit, and completes the exchange. From the read
// loop the writes are held back for a commit that comes anyway (see
// lazyEnds) and the exchange completes at once; past Broker.maxLazy they go in
// the pending group and it completes after. From the ack loop itself
// (inLoop), which must not wait on its own FIFO, they commit on their own.
func (o *outbound) finishQoS2(om *outMsg, inLoop bool) bool {
	c := o.c
	if !om.rec {
		o.complete(om.pi)
		return true
	}
	o.mu.Lock()
	o.done[om.pos] = true
	o.mu.Unlock()
	write := func(tx *table.Tx) error { return c.endWrite(tx, om.pi, om.pos) }
	if !inLoop {
		o.mu.Lock()
		o.ending[om.pi] = om.pos
		o.mu.Unlock()
		if c.lazy.add(om.pi, om.pos, c.b.maxLazy()) {
			o.complete(om.pi)
			return true
		}
		o.ended([]lazyEnd{{pi: om.pi}})
		return c.laterDelivery(write, ackEntry{then: func() { o.complete(om.pi) }})
	}
	tx := c.b.db.Begin()
	if err := write(tx); err != nil {
		c.fail(err)
		return false
	}
	h, err := tx.Submit(c.ctx)
	if err != nil {
		c.fail(err)
		return false
	}
	go func() {
		if _, err := h.Wait(c.ctx); err == nil {
			o.complete(om.pi)
		}
	}()
	return true
}

// offer queues an in-memory delivery; a full queue drops it (the
// subscriber is too slow for at-most-once traffic).
func (o *outbound) offer(d direct) {
	if !o.direct.offer(d) {
		o.c.b.metrics.droppedSlow.Add(1)
		o.c.log.Debug("slow subscriber: in-memory delivery dropped", "topic", d.msg.Topic)
	}
}

// persist writes the session record with the acknowledged checkpoint and
// drops completion marks it covers. final waits for the commits.
//
// One commit drops at most Broker.maxStateDeletes marks. A subscriber taking more
// QoS 2 messages than that between two persists leaves more behind, so
// persist goes on with further commits until none is left: otherwise the
// marks (in memory and in the store) would grow for as long as the load
// lasts. Each of those commits carries the session record too, so no
// commit deletes a mark without the checkpoint that covers it.
func (o *outbound) persist(ctx context.Context, final bool) error {
	sub := o.currentSub()
	if sub == nil {
		return nil
	}
	if !final && !o.due(sub.Checkpoint()) && !o.garbage() && !o.c.lazy.pending() {
		return nil
	}
	tx, more, err := o.sessionSweepTx()
	if err != nil {
		return err
	}
	// The exchange endings held back go with the checkpoint.
	ends, err := o.c.writeLazy(tx)
	if err != nil {
		return err
	}
	var last *engine.Handle
	for {
		if !final {
			tx.Defer()
		}
		h, err := tx.Submit(ctx)
		if err != nil {
			if last == nil {
				// Never submitted: the records stay, and their ids may
				// be reused (a reuse overwrites the record).
				o.ended(ends)
			}
			return err
		}
		if last == nil && len(ends) > 0 && !final {
			o.c.push(ackEntry{h: h, then: func() { o.ended(ends) }})
		}
		last = h
		if !more {
			break
		}
		if tx, more, err = o.sessionSweepTx(); err != nil {
			return err
		}
	}
	if final {
		// Handles complete in submission order: the last one done means
		// every one is.
		if _, err = last.Wait(ctx); err == nil {
			o.ended(ends)
		}
		return err
	}
	return nil
}

// due reports whether a checkpoint at cp is worth a commit now. A
// checkpoint that moved only over messages for other sessions changes
// nothing a restart would re-send, so it is written only now and then
// (for retention after a crash and a shorter replay scan); one that moved
// over deliveries this session completed is written at once, so a crash
// re-sends at most what was in flight.
func (o *outbound) due(cp table.Cursor) bool {
	if cp == o.persisted {
		return false
	}
	if o.progress.Load() != o.persistedProgress.Load() || o.asked.Swap(false) {
		return true
	}
	return time.Since(o.persistedAt) >= o.c.b.opts.RetentionEvery
}

// setSince records that the plain subscription filter matches only
// messages after log position pos; o.mu held.
func (o *outbound) setSince(filter string, pos table.Cursor) {
	if o.since == nil {
		o.since = map[string]table.Cursor{}
	}
	o.since[filter] = pos
}

// garbage reports whether completion marks at or below the persisted
// checkpoint are still waiting to be deleted.
func (o *outbound) garbage() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for pos := range o.done {
		if !o.persisted.Less(pos) {
			return true
		}
	}
	return false
}

// sessionTx returns a transaction writing the session record as it stands:
// subscriptions, acknowledged checkpoint, and the deletes of up to
// Broker.maxStateDeletes completion marks it covers (persist drops the rest).
func (o *outbound) sessionTx() (*table.Tx, error) {
	tx, _, err := o.sessionSweepTx()
	return tx, err
}

// sessionSweepTx is sessionTx, also reporting whether covered completion
// marks are left for another commit.
func (o *outbound) sessionSweepTx() (*table.Tx, bool, error) {
	c := o.c
	var cp table.Cursor
	if sub := o.currentSub(); sub != nil {
		cp = sub.Checkpoint()
	} else {
		cp = c.rec.Checkpoint
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	c.rec.Checkpoint = cp
	c.rec.NextPI = o.nextPI
	c.rec.SentHigh = o.sentHigh
	c.rec.Q1 = c.rec.Q1[:0]
	for _, om := range o.inflight {
		if om.qos == 1 && om.hasEv {
			c.rec.Q1 = append(c.rec.Q1, q1Slot{Pos: om.pos, PI: om.pi})
		}
	}
	for pos, pi := range o.q1ids { // restored, not re-sent yet
		if cp.Less(pos) {
			c.rec.Q1 = append(c.rec.Q1, q1Slot{Pos: pos, PI: pi})
		}
	}
	c.rec.Subs = c.rec.Subs[:0]
	for _, s := range o.subs {
		r := recordOf(s)
		if since, ok := o.since[s.Filter]; ok && s.Group == "" {
			if cp.Less(since) {
				r.Since = &since
			} else {
				delete(o.since, s.Filter) // the checkpoint passed it: no message left to hold back
			}
		}
		c.rec.Subs = append(c.rec.Subs, r)
	}
	tx := c.b.db.Begin()
	// Marks at or below the checkpoint are garbage: drop them, at most
	// Broker.maxStateDeletes per commit so the transaction stays within
	// the engine's batch limit.
	n, more, chunk := 0, false, c.b.maxStateDeletes()
	held := map[table.Cursor]bool{}
	for _, pos := range o.ending {
		held[pos] = true // its mark may not be written yet
	}
	for pos := range o.done {
		if cp.Less(pos) || held[pos] {
			continue
		}
		if n == chunk {
			more = true
			break
		}
		tx.DeleteStateUnchecked(tableDone, c.client+slotSep+pos.String())
		delete(o.done, pos)
		n++
	}
	if err := putSession(tx, c.client, &c.rec); err != nil {
		return nil, false, err
	}
	o.persisted = cp
	o.persistedProgress.Store(o.progress.Load())
	o.persistedAt = time.Now()
	return tx, more, nil
}

// unindex removes the session's subscriptions from the broker's index:
// each by its filter, so a teardown costs what the session's own
// subscriptions cost, not a walk of every subscription in the index.
func (o *outbound) unindex() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		o.c.b.index.Remove(o.c.client, s.Group, s.Filter)
	}
}

// stop ends the sender and takes the session off the route.
func (o *outbound) stop() {
	if sub := o.currentSub(); sub != nil {
		sub.Close()
		o.c.b.leave(o.c.client, sub)
	}
	<-o.stopped
}
