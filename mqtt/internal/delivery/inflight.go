package delivery

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The session's in-flight window: the QoS 1 and QoS 2 exchanges it has
// open with the client, by packet id, and the acknowledgements that
// move them on (PUBACK; PUBREC, PUBREL, PUBCOMP) until each completes and
// its log event is acknowledged.

// outMsg is one open QoS 1 or QoS 2 exchange of the in-flight window, by
// its packet id pi. ev is the log event it delivers (hasEv; none for an
// in-memory delivery), acknowledged when it completes; pos is that
// event's log position, by which a restored exchange finds its event.
type outMsg struct {
	o     *Session
	pi    uint16
	qos   byte
	ev    table.Event
	hasEv bool
	pos   logpos.Pos
	msg   *message.Message
	rec   bool // a session.OutTable record exists
	// slot is the record's id, with rec: set before the record is
	// shared with another goroutine (a PUBLISH sent, or the session
	// restored), and never changed.
	slot  string
	state byte // outSent or outPubrec
	// rp is the replay the event came from (its reader takes the ack),
	// nil for the session's member.
	rp *Replay
	// gauged: counted in the in-flight gauge (metrics.InflightOut) until
	// it completes or the connection ends; under o.mu.
	gauged bool
	// share is the shared subscription of an in-memory delivery, zero
	// for any other, and at its log position (see Session.Unsent).
	share topic.Share
	at    LogPos
}

// The states of a QoS 2 exchange, as outMsg.state and in its stored
// record (so their values do not change): outSent waits for PUBREC,
// outPubrec has sent PUBREL and waits for PUBCOMP.
const (
	outSent   = 1
	outPubrec = 2
)

// track enters om in the in-flight window; o.mu held.
func (o *Session) track(om *outMsg) {
	if o.inflight == nil {
		o.inflight = map[uint16]*outMsg{}
	}
	if old := o.inflight[om.pi]; old != nil {
		o.inflightBytes -= int64(len(old.msg.Payload)) // replaced: counted once
		if old.qos == 1 {
			o.inflightQ1--
		}
	}
	o.inflight[om.pi] = om
	o.inflightBytes += int64(len(om.msg.Payload))
	if om.qos == 1 {
		o.inflightQ1++
	}
}

// AwaitingAcks reports whether deliveries wait for the client's
// acknowledgements: its connection then expects input soon, and waits
// for it on its goroutine rather than parking.
func (o *Session) AwaitingAcks() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.inflight) > 0
}

// Puback completes the QoS 1 exchange pi; a PUBACK for no such exchange
// is ignored.
func (o *Session) Puback(pi uint16) {
	o.mu.Lock()
	om := o.inflight[pi]
	if om == nil || om.qos != 1 {
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.complete(pi)
}

// Pubrec records the PUBREC durably, then sends PUBREL through the
// connection's ack FIFO.
func (o *Session) Pubrec(p *packet.Pubrec) bool {
	o.mu.Lock()
	om := o.inflight[p.PacketID]
	o.mu.Unlock()
	if om == nil || om.qos != 2 {
		rel := &packet.Pubrel{PacketID: p.PacketID}
		if o.v5 {
			rel.ReasonCode = packet.PacketIdentifierNotFound
		}
		return o.conn.Ack(rel)
	}
	if p.ReasonCode.IsError() {
		return o.finishQoS2(om, false) // the client refused it: the exchange ends [MQTT-4.3.3-4 in 5.0]
	}
	om.state = outPubrec
	if !om.rec {
		return o.conn.Ack(&packet.Pubrel{PacketID: p.PacketID})
	}
	return o.conn.LaterDelivery((*pubrecWrite)(om), Pending{Ack: packet.TypePubrel, PI: p.PacketID})
}

// pubrecWrite writes an exchange's record as it stands once PUBREC came
// (see Pubrec).
type pubrecWrite outMsg

func (w *pubrecWrite) WriteState(tx *table.Tx) error {
	return tx.PutStateUncheckedFrom(session.OutTable, w.slot, (*pubrecRecord)(w))
}

// exchangeEnd writes the end of an exchange with a record (see
// finishQoS2), and, as its entry's Notified, completes it once that is
// committed.
type exchangeEnd outMsg

func (e *exchangeEnd) WriteState(tx *table.Tx) error {
	return e.o.endWrite(tx, e.slot, e.pos, true)
}

func (e *exchangeEnd) TooLarge() {}
func (e *exchangeEnd) Done()     { e.o.complete(e.pi) }

// exchangeSent is, as its PUBLISH's entry's Notified, an exchange whose
// PUBLISH waits in the connection's FIFO (see send).
type exchangeSent outMsg

func (s *exchangeSent) TooLarge() {
	s.o.env.Counters.DroppedTooLarge.Add(1)
	s.o.finishQoS2((*outMsg)(s), true)
}

func (s *exchangeSent) Done() { s.o.queued.Add(-1) }

// Pubcomp ends the QoS 2 exchange pi once its PUBREL was sent; a PUBCOMP
// for no such exchange, or before the PUBREC, is ignored.
func (o *Session) Pubcomp(pi uint16) {
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
// lazyEnds) and the exchange completes at once; past Env.MaxLazy they go in
// the pending group and it completes after. From the ack loop itself
// (inLoop), which must not wait on its own FIFO, they commit on their own.
func (o *Session) finishQoS2(om *outMsg, inLoop bool) bool {
	if !om.rec {
		o.complete(om.pi)
		return true
	}
	o.mu.Lock()
	o.markDone(om.pos)
	o.mu.Unlock()
	end := (*exchangeEnd)(om)
	if !inLoop {
		o.mu.Lock()
		if o.ending == nil {
			o.ending = map[uint16]logpos.Pos{}
		}
		o.ending[om.pi] = om.pos
		o.mu.Unlock()
		if n := o.lazy.add(om.pi, om.slot, om.pos, o.env.MaxLazy); n > 0 {
			o.complete(om.pi)
			if n >= persistAt(o.env.MaxLazy) {
				// The checkpoint takes the endings, with no marks for
				// those it covers. Written from here, not asked of the
				// sender: a burst of PUBCOMPs outruns the sender's turn.
				o.checkpoint()
			}
			return true
		}
		o.ended([]lazyEnd{{pi: om.pi}})
		return o.conn.LaterDelivery(end, Pending{Notify: end})
	}
	tx := o.db.Begin()
	if err := end.WriteState(tx); err != nil {
		o.conn.Fail(err)
		return false
	}
	h, err := tx.Submit(o.ctx)
	if err != nil {
		o.conn.Fail(err)
		return false
	}
	go func() {
		if _, err := h.Wait(o.ctx); err != nil {
			// The exchange stays open: end the connection, as a failed
			// commit in the ack loop does, rather than hold its window
			// slot for as long as the connection lasts.
			o.conn.Warn("end QoS 2 delivery", err)
			o.conn.Fail(err)
			return
		}
		o.complete(om.pi)
	}()
	return true
}

// complete ends an exchange and acknowledges its log event.
func (o *Session) complete(pi uint16) {
	o.mu.Lock()
	om := o.inflight[pi]
	delete(o.inflight, pi)
	if om != nil {
		o.inflightBytes -= int64(len(om.msg.Payload))
		if om.qos == 1 {
			o.inflightQ1--
		}
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
		o.env.Counters.InflightOut.Add(-1)
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

// Unsent returns, once the session has stopped, the deliveries for
// shared subscriptions it owes but will not complete: those still queued,
// and the QoS 1 ones sent and not acknowledged (which a reconnect does not
// send again: they have no log position). The broker offers them to the
// group's other members. A QoS 2 one stays: its record completes it when
// the session comes back [MQTT-4.8.2-3].
func (o *Session) Unsent() []Direct {
	out := o.direct.takeShared()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, om := range o.inflight {
		if om.qos == 1 && !om.hasEv && om.share != (topic.Share{}) {
			out = append(out, Direct{Msg: om.msg, QoS: 1, Share: om.share, At: om.at})
		}
	}
	return out
}
