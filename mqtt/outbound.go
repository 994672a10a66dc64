package mqtt

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	since sinceMarks
	// queued counts PUBLISHes waiting in grp or the connection's FIFO.
	queued atomic.Int32
	// grp holds the records of QoS 2 deliveries not yet committed
	// (sender only; see flushGroup).
	grp      group
	inflight map[uint16]*outMsg
	// inflightBytes sums the payload bytes of inflight, for
	// Options.MaxInflightBytes.
	inflightBytes int64
	resumed       map[table.Cursor]*outMsg // restored QoS 2 state awaiting its log event
	done          map[table.Cursor]bool    // QoS 2 completed above the checkpoint
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

	// replays holds the subscriptions replaying history, by filter (see
	// replay.go); their forwarders hand events over on replayCh, made
	// with the session's first replay (under mu; see replayChan).
	replays  map[string]*replay
	replayCh chan replayItem
	// posFilters holds the plain subscription filters whose deliveries
	// carry their log position (PropPosition).
	posFilters map[string]bool
	// tables holds the readers of the subscriptions under the tables
	// prefix, by filter (see tables.go); they hand deliveries over on
	// tableCh, made with the session's first one (under mu).
	tables  map[string]*tableFeed
	tableCh chan tableItem

	// progress counts completed QoS 1/2 deliveries; persisted at
	// persistedProgress, at persistedAt.
	progress          atomic.Uint64
	persistedProgress atomic.Uint64
	persistedAt       time.Time
	// persistAsk asks the sender for a checkpoint write. A session has no
	// ticker: the first delivery completed after a write arms a timer of
	// Options.CheckpointEvery (armed), a window's worth of them (at most
	// persistEvery: a client's window may be 65,535) asks at once, so a
	// crash re-sends no more than that, and retention asks an
	// idle session whose checkpoint moved over others' messages (asked).
	// An idle session costs no wake-ups.
	persistAsk atomic.Bool
	armed      atomic.Bool
	asked      atomic.Bool

	snd sender
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
	// rp is the replay the event came from (its reader takes the ack),
	// nil for the session's member.
	rp *replay
	// gauged: counted in the in-flight gauge (metrics.inflightOut) until
	// it completes or the connection ends; under o.mu.
	gauged bool
}

const (
	outSent   = 1
	outPubrec = 2
)

// persistEvery bounds the deliveries an online session completes between
// two writes of its checkpoint, whatever its window: what a crash re-sends
// to a subscriber that was online. One small commit per this many
// deliveries.
const persistEvery = 256

// outRecord is the stored form of an outbound QoS 2 message in flight.
type outRecord struct {
	PI    uint16       `json:"pi"`
	State byte         `json:"state"`
	Pos   table.Cursor `json:"pos"`
	Msg   []byte       `json:"msg"`
}

// newOutbound restores the sending side of c's session; present says the
// session existed (a new one has no delivery state to read), head is the
// log head read once the connection was registered.
func newOutbound(c *conn, window int, present bool, head table.Cursor) (*outbound, error) {
	// The in-flight maps are made on first use: an idle session holds none.
	o := &outbound{
		c: c, window: window,
		freed:     make(chan struct{}, 1),
		persisted: c.rec.Checkpoint, nextPI: c.rec.NextPI, sentHigh: c.rec.SentHigh,
	}
	o.subs = make([]topic.Subscription, 0, len(c.rec.Subs))
	for _, s := range c.rec.Subs {
		o.subs = append(o.subs, s.sub(c.client))
		if s.Since != nil {
			o.since.set(s.Filter, *s.Since)
		}
		if s.Pos {
			if o.posFilters == nil {
				o.posFilters = map[string]bool{}
			}
			o.posFilters[s.Filter] = true
		}
	}
	for _, q := range c.rec.Q1 {
		if o.q1ids == nil {
			o.q1ids = map[table.Cursor]uint16{}
		}
		o.q1ids[q.Pos] = q.PI
	}
	o.liveFrom = head
	if !present {
		return o, nil
	}
	ctx := c.ctx
	db := c.b.db
	err := db.Range(ctx, tableOut, c.client+slotSep, func(r table.Record) bool {
		var or outRecord
		if r.Deleted || or.decode(r.Value) != nil {
			return true
		}
		var m Message
		if m.UnmarshalBinary(or.Msg) != nil {
			return true
		}
		om := &outMsg{pi: or.PI, qos: 2, pos: or.Pos, msg: &m, rec: true, state: or.State}
		o.track(om)
		if o.resumed == nil {
			o.resumed = map[table.Cursor]*outMsg{}
		}
		o.resumed[or.Pos] = om
		return true
	})
	if err != nil {
		return nil, err
	}
	err = db.Range(ctx, tableDone, c.client+slotSep, func(r table.Record) bool {
		var cur table.Cursor
		if !r.Deleted && cur.UnmarshalText([]byte(r.ID[len(c.client)+1:])) == nil {
			o.markDone(cur)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// start re-sends the restored QoS 2 state and starts the sender. It runs
// once the CONNACK is written, on the read loop or the ack loop.
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
			d := delivery{msg: om.msg, qos: 2, ids: ids, retain: om.msg.Retain && rap, dup: true}
			_ = c.write(o.publishPacket(d, om.pi))
		}
	}
	if err := o.subscribe(c.rec.Checkpoint); err != nil {
		c.log.Error("subscribe to the message log", "err", err)
		c.fail(err)
		o.snd.end()
		return
	}
	o.begin() // catch up from the checkpoint
	o.startTableFeeds()
}

// subscribe starts the session's member of the router: it catches up
// from from, then joins the route.
func (o *outbound) subscribe(from table.Cursor) error {
	b := o.c.b
	m := b.fan.JoinFunc(from, func(ev table.Event) bool { return o.wants(ev.ID) }, o.wake)
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
	if ok && len(o.posFilters) > 0 && o.wantsPosLocked(m.Topic) {
		m.UserProps = append(m.UserProps, UserProperty{Key: PropPosition, Value: pos.String()})
	}
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
	o.send(delivery{msg: &m, qos: qos, ids: ids, retain: m.Retain && rap, dup: dup, ev: ev, hasEv: true})
}

// match returns the delivery QoS, subscription identifiers and retain-as-
// published of the session's plain subscriptions matching m, at log
// position pos; o.mu held.
func (o *outbound) match(m *Message, pos table.Cursor) (qos byte, ids []uint32, rap, ok bool) {
	for _, s := range o.subs {
		if s.Group != "" || !topic.Match(s.Filter, m.Topic) || (s.NoLocal && m.From == o.c.client) {
			continue
		}
		if since, ok := o.since.get(s.Filter); ok && !since.Less(pos) {
			continue
		}
		if len(o.replays) > 0 && o.heldLocked(s.Filter, pos) {
			continue // the replay delivers it
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
	o.send(delivery{msg: d.msg, qos: d.qos, ids: d.ids, retain: d.retain})
}

// delivery is one PUBLISH for the session's client, as the sender hands
// it to send: named fields, so a call site says what each flag means.
type delivery struct {
	msg *Message
	// qos is the delivery QoS: the lower of the message's and the
	// matching subscription's.
	qos byte
	// ids are the identifiers of the matching subscriptions (5.0).
	ids []uint32
	// retain is the RETAIN flag as sent (retain as published).
	retain bool
	// dup marks a re-send of what an earlier connection may have sent;
	// it is sent only on QoS 1 and 2.
	dup bool
	// ev is the log event the message was read from, acknowledged once
	// the delivery completes; hasEv is false for an in-memory delivery
	// (shared subscriptions, retained messages, table feeds), which has
	// none. A value, not a pointer: a pointer to the caller's event,
	// stored beside msg, would move every event to the heap.
	ev    table.Event
	hasEv bool
	// rp is the replay ev comes from (its reader takes the ack), nil for
	// the session's member.
	rp *replay
}

// send writes one PUBLISH; QoS 1/2 ones enter the in-flight window.
func (o *outbound) send(d delivery) {
	c := o.c
	m, qos, ev, hasEv, rp := d.msg, d.qos, d.ev, d.hasEv, d.rp
	c.b.metrics.msgsOut[qos].Add(1)
	c.b.metrics.bytesOut.Add(uint64(len(m.Payload)))
	if qos == 0 {
		var then func()
		switch {
		case rp != nil:
			then = func() { _ = rp.sub.Ack(ev) }
		case hasEv:
			then = func() { _ = o.sub.Ack(ev) }
		}
		o.deliver(o.publishPacket(d, 0), 0, then)
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
	om := &outMsg{pi: pi, qos: qos, ev: ev, hasEv: hasEv, pos: ev.Cursor(), msg: m, state: outSent, rp: rp, gauged: true}
	o.track(om)
	o.mu.Unlock()
	c.b.metrics.inflightOut.Add(1)
	p := o.publishPacket(d, pi)
	if qos == 1 {
		// Too large for the client: dropped, as if acknowledged [MQTT-3.1.2-25].
		o.deliver(p, pi, nil)
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

// deliver writes a PUBLISH that needs no commit (QoS 0 and 1, packet id
// pi), dropped as tooLarge says when it is over the client's maximum
// packet size, then runs after.
//
// A QoS 2 PUBLISH waits for the commit of its record, in the sender's
// group and then in the connection's FIFO, so the sender goes on to the
// next message and the records of many deliveries share one commit. While
// any such PUBLISH waits, the others queue behind it: the client sees
// them in the order the sender took them.
func (o *outbound) deliver(p *packet.Publish, pi uint16, after func()) {
	c := o.c
	o.flushGroup()
	if o.queued.Load() == 0 {
		if err := c.writeBuffered(p); errors.Is(err, packet.ErrPacketTooLarge) {
			o.tooLarge(pi)
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
	c.push(ackEntry{pkt: p, atSent: PointDelivered, pi: pi, tooLarge: func() { o.tooLarge(pi) }, then: func() {
		o.queued.Add(-1)
		if after != nil {
			after()
		}
	}})
}

// tooLarge drops a QoS 0 or QoS 1 PUBLISH (packet id pi, 0 for QoS 0)
// over the client's maximum packet size, as if acknowledged
// [MQTT-3.1.2-25].
func (o *outbound) tooLarge(pi uint16) {
	o.c.b.metrics.droppedTooLarge.Add(1)
	if pi != 0 {
		o.complete(pi)
	}
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

// publishPacket builds the PUBLISH of d with packet id pi (0 at QoS 0):
// DUP only at QoS 1 and 2, the message's 5.0 properties, the
// subscription identifiers and a topic alias when the client takes them.
func (o *outbound) publishPacket(d delivery, pi uint16) *packet.Publish {
	m := d.msg
	p := &packet.Publish{Topic: m.Topic, PacketID: pi, QoS: packet.QoS(d.qos), Retain: d.retain, Dup: d.dup && d.qos > 0, Payload: m.Payload}
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
		for _, id := range d.ids {
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
	v := (&outRecord{PI: om.pi, State: om.state, Pos: om.pos, Msg: enc}).encode()
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
	if om != nil {
		o.inflightBytes -= int64(len(om.msg.Payload))
	}
	if om != nil && !om.hasEv {
		// Completed before the replay reached its log entry: that entry
		// is now acknowledged through the done marks, not attached here.
		delete(o.resumed, om.pos)
	}
	gauged := om != nil && om.gauged
	if gauged {
		om.gauged = false
	}
	o.mu.Unlock()
	if gauged {
		o.c.b.metrics.inflightOut.Add(-1)
	}
	switch {
	case om != nil && om.rp != nil:
		_ = om.rp.sub.Ack(om.ev)
		o.replayDone(om.rp)
	case om != nil && om.hasEv:
		if sub := o.currentSub(); sub != nil {
			_ = sub.Ack(om.ev)
		}
	}
	if om != nil {
		// After the Ack: the write asked for covers this delivery.
		if n := o.progress.Add(1); n-o.persistedProgress.Load() >= uint64(max(min(o.window, persistEvery), 1)) {
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
	v := (&outRecord{PI: om.pi, State: outPubrec, Pos: om.pos, Msg: enc}).encode()
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
	o.markDone(om.pos)
	o.mu.Unlock()
	write := func(tx *table.Tx) error { return c.endWrite(tx, om.pi, om.pos) }
	if !inLoop {
		o.mu.Lock()
		if o.ending == nil {
			o.ending = map[uint16]table.Cursor{}
		}
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
		if _, err := h.Wait(c.ctx); err != nil {
			// The exchange stays open: end the connection, as a failed
			// commit in the ack loop does, rather than hold its window
			// slot for as long as the connection lasts.
			c.warn("end QoS 2 delivery", err)
			c.fail(err)
			return
		}
		o.complete(om.pi)
	}()
	return true
}

// offer queues an in-memory delivery; a full queue drops it (the
// subscriber is too slow for at-most-once traffic).
func (o *outbound) offer(d direct) {
	if !o.direct.offer(d) {
		o.c.b.metrics.droppedSlow.Add(1)
		o.c.log.Debug("slow subscriber: in-memory delivery dropped", "topic", d.msg.Topic)
		return
	}
	o.wake()
}

// track enters om in the in-flight window; o.mu held.
func (o *outbound) track(om *outMsg) {
	if o.inflight == nil {
		o.inflight = map[uint16]*outMsg{}
	}
	if old := o.inflight[om.pi]; old != nil {
		o.inflightBytes -= int64(len(old.msg.Payload)) // replaced: counted once
	}
	o.inflight[om.pi] = om
	o.inflightBytes += int64(len(om.msg.Payload))
}

// markDone records that the QoS 2 delivery at pos completed above the
// checkpoint; o.mu held.
func (o *outbound) markDone(pos table.Cursor) {
	if o.done == nil {
		o.done = map[table.Cursor]bool{}
	}
	o.done[pos] = true
}

// sinceMark is a plain subscription filter that matches only messages
// after log position pos.
type sinceMark struct {
	filter string
	pos    table.Cursor
}

// wantsPosLocked reports whether a plain subscription matching name asked
// for log positions on its deliveries; o.mu held.
func (o *outbound) wantsPosLocked(name string) bool {
	for _, s := range o.subs {
		if s.Group == "" && o.posFilters[s.Filter] && topic.Match(s.Filter, name) {
			return true
		}
	}
	return false
}

// sinceMarks holds a session's since positions. A session has few
// subscriptions, and only those made while it was online have a mark, so
// a slice searched in order costs less than a map.
type sinceMarks []sinceMark

func (s sinceMarks) get(filter string) (table.Cursor, bool) {
	for _, m := range s {
		if m.filter == filter {
			return m.pos, true
		}
	}
	return table.Cursor{}, false
}

func (s *sinceMarks) set(filter string, pos table.Cursor) {
	for i := range *s {
		if (*s)[i].filter == filter {
			(*s)[i].pos = pos
			return
		}
	}
	*s = append(*s, sinceMark{filter, pos})
}

func (s *sinceMarks) del(filter string) {
	*s = slices.DeleteFunc(*s, func(m sinceMark) bool { return m.filter == filter })
	if len(*s) == 0 {
		*s = nil
	}
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
