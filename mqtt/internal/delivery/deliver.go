package delivery

import (
	"errors"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// A session's deliveries on their way to the client: a log event or an
// in-memory delivery becomes a PUBLISH, written at once or queued behind
// the commit of a QoS 2 record, in the order the sender took them.

// deliverEvent sends one message from the log, or acknowledges it at once
// when nothing is owed to the client.
func (o *Session) deliverEvent(ev table.Event) {
	pos := o.posOf(ev)
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
	var m message.Message
	if err := m.DecodeEvent(ev.Value, ev.ID); err != nil {
		o.mu.Unlock()
		o.log.Warn("undecodable message in the log skipped", "key", ev.Key, "err", err)
		_ = o.sub.Ack(ev)
		return
	}
	qos, ids, rap, ok := o.match(&m, pos)
	if ok && len(o.posFilters) > 0 && o.wantsPosLocked(m.Topic) {
		m.UserProps = append(m.UserProps, message.UserProperty{Key: PropPosition, Value: pos.String()})
	}
	o.mu.Unlock()
	// What the session may no longer read (an ACL reloaded since it
	// subscribed) is passed over like a message it does not match.
	ok = ok && o.conn.MayRead(m.Topic)
	if ok && qos == 0 && o.liveFrom.Covers(pos) {
		// At most once: a QoS 0 subscription gets no message published
		// before this connection came online, neither what it missed
		// offline nor, after a crash, what an earlier connection may
		// already have sent (no acknowledgement says which).
		_ = o.sub.Ack(ev)
		return
	}
	if !ok || m.Expired(time.Now()) {
		if ok {
			o.env.Counters.DroppedExpired.Add(1)
		}
		_ = o.sub.Ack(ev)
		return
	}
	o.mu.Lock()
	// Sent before (by an earlier connection): a re-send carries DUP.
	dup := o.sentHigh.Covers(pos)
	if !dup {
		o.sentHigh.Advance(pos)
	}
	o.mu.Unlock()
	o.send(delivery{msg: &m, qos: qos, ids: ids, retain: m.Retain && rap, dup: dup, ev: ev, hasEv: true})
}

// deliverDirect sends one in-memory delivery (see Offer) unless its
// message expired while it waited.
func (o *Session) deliverDirect(d Direct) {
	if d.Msg.Expired(time.Now()) {
		return
	}
	o.send(delivery{msg: d.Msg, qos: d.QoS, ids: d.IDs, retain: d.Retain, share: d.Share, at: d.At})
}

// OfferRetained queues the retained messages a SUBSCRIBE matched, all of
// them, behind the in-memory deliveries queued before: ds, read already,
// then (unless more is nil) the pages more reads, each once the queue has
// been sent. The sender sends them as the client's window allows, and
// none is dropped.
func (o *Session) OfferRetained(ds []Direct, more RetainedPages) {
	if len(ds) == 0 && more == nil {
		return
	}
	o.direct.offerAll(ds)
	if more != nil {
		o.direct.addPages(more)
	}
	o.wake()
}

// Offer queues an in-memory delivery; a full queue drops it (the
// subscriber is too slow for at-most-once traffic).
func (o *Session) Offer(d Direct) {
	if !o.TryOffer(d) {
		o.env.Counters.DroppedSlow.Add(1)
		o.log.Debug("slow subscriber: in-memory delivery dropped", "topic", d.Msg.Topic)
	}
}

// OfferOwed queues an in-memory delivery whatever the queue holds: one
// owed to the session that is in memory already (a shared group's message
// another member left undelivered), which the queue's bound would only
// drop.
func (o *Session) OfferOwed(d Direct) {
	o.direct.offerAll([]Direct{d})
	o.wake()
}

// TryOffer queues an in-memory delivery, reporting false, and leaving d
// to the caller, when the queue is full.
func (o *Session) TryOffer(d Direct) bool {
	if !o.direct.offer(d) {
		return false
	}
	o.wake()
	return true
}

// delivery is one PUBLISH for the session's client, as the sender hands
// it to send: named fields, so a call site says what each flag means.
type delivery struct {
	msg *message.Message
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
	rp *Replay
	// share is the shared subscription of an in-memory delivery, zero
	// for any other.
	share topic.Share
	// at is a shared delivery's log position (Direct.At).
	at LogPos
}

// send writes one PUBLISH; QoS 1/2 ones enter the in-flight window.
func (o *Session) send(d delivery) {
	m, qos, ev, hasEv, rp := d.msg, d.qos, d.ev, d.hasEv, d.rp
	o.env.Counters.MsgsOut[qos].Add(1)
	o.env.Counters.BytesOut.Add(uint64(len(m.Payload)))
	if qos == 0 {
		var then func()
		switch {
		case rp != nil:
			then = func() { _ = rp.sub.Ack(ev) }
		case hasEv:
			then = func() { _ = o.sub.Ack(ev) }
		}
		o.deliver(d, 0, then)
		return
	}
	o.mu.Lock()
	pi := o.packetIDLocked(d)
	om := &outMsg{o: o, pi: pi, qos: qos, ev: ev, hasEv: hasEv, pos: o.posOf(ev), msg: m, state: outSent, rp: rp, gauged: true, share: d.share, at: d.at}
	o.track(om)
	o.mu.Unlock()
	o.env.Counters.InflightOut.Add(1)
	if qos == 1 {
		// Too large for the client: dropped, as if acknowledged [MQTT-3.1.2-25].
		o.deliver(d, pi, nil)
		return
	}
	p := o.publishPacket(d, pi)
	// Durable before the PUBLISH: a reconnect or restart re-sends it with
	// this id. In-memory deliveries too (shared subscriptions, retained
	// messages): their exchange must also complete after a reconnect
	// [MQTT-4.8.2-3] [MQTT-4.4.0-1].
	if err := o.addRecord(om); err != nil {
		o.conn.Warn("record outbound QoS 2", err)
		o.conn.Fail(err)
		return
	}
	// Its PUBLISH waits in the group, then in the connection's FIFO, for
	// the commit of the record.
	o.queued.Add(1)
	o.grp.entries = append(o.grp.entries, Pending{Pkt: p, Delivered: true, PI: pi, Notify: (*exchangeSent)(om)})
	if len(o.grp.entries) >= o.env.Group {
		o.flushGroup()
	}
}

// publishPacket builds the PUBLISH of d with packet id pi (0 at QoS 0):
// DUP only at QoS 1 and 2, the message's 5.0 properties, the
// subscription identifiers and a topic alias when the client takes them.
func (o *Session) publishPacket(d delivery, pi uint16) *packet.Publish {
	p := new(packet.Publish)
	o.buildPublish(p, d, pi, true)
	return p
}

// buildPublish builds the PUBLISH of publishPacket in p, a zero one;
// alias applies a topic alias, which only a writer about to write p may
// (see Conn.TryWrite).
func (o *Session) buildPublish(p *packet.Publish, d delivery, pi uint16, alias bool) {
	m := d.msg
	*p = packet.Publish{Topic: m.Topic, PacketID: pi, QoS: packet.QoS(d.qos), Retain: d.retain, Dup: d.dup && d.qos > 0, Payload: m.Payload}
	if o.v5 {
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
		if alias {
			o.conn.ApplyAlias(p)
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
func (o *Session) deliver(d delivery, pi uint16, after func()) {
	o.flushGroup()
	if o.queued.Load() == 0 {
		// Written at once: built in the sender's own PUBLISH, which the
		// write encodes and keeps nothing of.
		p := o.pub
		if p == nil {
			p, _ = o.env.publishes.Get().(*packet.Publish)
			if p == nil {
				p = new(packet.Publish)
			}
			o.pub = p
		}
		o.buildPublish(p, d, pi, true)
		err := o.conn.WriteBuffered(p)
		*p = packet.Publish{} // holds no payload or topic while idle
		if errors.Is(err, packet.ErrPacketTooLarge) {
			o.tooLarge(pi)
		} else if err != nil {
			return
		}
		o.conn.Delivered(pi)
		if after != nil {
			after()
		}
		return
	}
	p := o.publishPacket(d, pi)
	o.queued.Add(1)
	o.conn.Push(Pending{Pkt: p, Delivered: true, PI: pi, TooLarge: func() { o.tooLarge(pi) }, Then: func() {
		o.queued.Add(-1)
		if after != nil {
			after()
		}
	}})
}

// flushGroup submits the records of the QoS 2 deliveries taken since the
// last flush in one commit and queues their PUBLISHes behind it. Sender
// only: it runs before the sender waits for anything and before a
// delivery that does not wait for a commit.
func (o *Session) flushGroup() {
	if o.grp.tx == nil {
		return
	}
	tx, entries := o.grp.tx, o.grp.entries
	o.grp.tx, o.grp.entries = nil, o.grp.entries[:0]
	// The subscriber's window keeps other deliveries going meanwhile.
	tx.Defer()
	h, err := tx.Submit(o.ctx)
	if err != nil {
		o.conn.Warn("record outbound QoS 2", err)
		o.conn.Fail(err)
		return
	}
	// Committed already (no sync to wait for): the PUBLISHes go out from
	// here, not from the FIFO's loop on another goroutine, unless
	// something is queued before them.
	sent := false
	for _, e := range entries {
		e.H = h
		ok, s := o.conn.Send(e)
		if !ok {
			return
		}
		sent = sent || s
	}
	if sent {
		o.conn.Flush()
	}
}

// tooLarge drops a QoS 0 or QoS 1 PUBLISH (packet id pi, 0 for QoS 0)
// over the client's maximum packet size, as if acknowledged
// [MQTT-3.1.2-25].
func (o *Session) tooLarge(pi uint16) {
	o.env.Counters.DroppedTooLarge.Add(1)
	if pi != 0 {
		o.complete(pi)
	}
}
