package mqtt

import (
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// handleSubscribe adds subscriptions, persists the session durably before
// the SUBACK (through the ack FIFO), then sends matching retained messages.
func (c *conn) handleSubscribe(p *packet.Subscribe) bool {
	o := c.out
	var subID uint32
	if len(p.Properties.SubscriptionIDs) > 0 {
		subID = p.Properties.SubscriptionIDs[0]
	}
	ack := &packet.Suback{PacketID: p.PacketID, ReasonCodes: make([]packet.ReasonCode, len(p.Subscriptions))}
	type newSub struct {
		s       topic.Subscription
		existed bool
	}
	var added []newSub
	// A new subscription matches the messages committed after this point
	// only; those before it reach the client as retained messages or not
	// at all.
	var head table.Cursor
	var err error
	c.b.onStore(func() { head, err = c.b.db.Head(c.ctx) })
	if err != nil {
		c.flushConnack()
		c.log.Warn("subscribe: log head", "err", err)
		c.disconnect(packet.UnspecifiedError, "store unavailable")
		return false
	}
	anyShared := false
	o.mu.Lock()
	for i, req := range p.Subscriptions {
		s := topic.Subscription{Client: c.client, Filter: req.Filter, QoS: byte(req.QoS), NoLocal: req.NoLocal,
			RetainAsPublished: req.RetainAsPublished, RetainHandling: byte(req.RetainHandling), ID: subID}
		sh, shared, err := topic.ParseShared(req.Filter)
		switch {
		case err != nil || !topic.ValidFilter(req.Filter) || c.b.checkTopic(req.Filter) != nil:
			ack.ReasonCodes[i] = packet.TopicFilterInvalid
			continue
		case shared && req.NoLocal && c.version == packet.V5:
			o.mu.Unlock()
			c.flushConnack()
			c.disconnect(packet.ProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
			return false
		case shared:
			s.Group, s.Filter = sh.Group, sh.Filter
		}
		if !c.maySubscribe(s.Filter) {
			ack.ReasonCodes[i] = packet.NotAuthorized
			continue
		}
		anyShared = anyShared || shared
		existed := false
		for j := range o.subs {
			if o.subs[j].Filter == s.Filter && o.subs[j].Group == s.Group {
				o.subs[j], existed = s, true
			}
		}
		if !existed && !c.b.subscriptionAllowed(len(o.subs)) {
			ack.ReasonCodes[i] = packet.QuotaExceeded
			continue
		}
		if !existed {
			o.subs = append(o.subs, s)
			if s.Group == "" {
				o.setSince(s.Filter, head)
			}
		}
		c.b.index.Add(s)
		added = append(added, newSub{s, existed})
		ack.ReasonCodes[i] = packet.ReasonCode(s.QoS)
	}
	o.mu.Unlock()
	if anyShared {
		c.b.startShared(head)
	}
	if c.version == packet.V311 {
		for i, rc := range ack.ReasonCodes {
			if rc.IsError() {
				ack.ReasonCodes[i] = 0x80 // the only 3.1.1 failure code
			}
		}
	}
	h, err := c.persistSubs()
	if err != nil {
		return false
	}
	if e := c.pendingConnack; e != nil {
		// This commit carries the CONNECT's session record too.
		c.pendingConnack = nil
		e.h = h
		if !c.push(*e) {
			return false
		}
	}
	return c.ack(ackEntry{pkt: ack, h: h, then: func() {
		for _, a := range added {
			c.sendRetained(a.s, a.existed)
		}
	}, kind: KindSession})
}

// persistSubs submits the session record with the current subscriptions.
func (c *conn) persistSubs() (*engine.Handle, error) {
	c.b.beforeSubmit(KindSession, c.client)
	var h *engine.Handle
	var err error
	c.b.onStore(func() {
		var tx *table.Tx
		if tx, err = c.out.sessionTx(); err != nil {
			c.fail(err)
			return
		}
		h, err = c.submit(tx)
	})
	return h, err
}

// sendRetained queues the retained messages matching a new subscription,
// per its retain handling; shared subscriptions get none [MQTT-3.8.4-? /
// 5.0 4.8.2].
func (c *conn) sendRetained(s topic.Subscription, existed bool) {
	if s.Group != "" || s.RetainHandling == byte(packet.DoNotSendRetained) ||
		(s.RetainHandling == byte(packet.SendRetainedIfNew) && existed) {
		return
	}
	c.b.onStore(func() { c.offerRetained(s) })
}

// offerRetained queues the retained messages matching s.
func (c *conn) offerRetained(s topic.Subscription) {
	_ = c.b.db.Range(c.ctx, tableRetained, "", func(r table.Record) bool {
		if r.Deleted || !topic.Match(s.Filter, r.ID) {
			return true
		}
		var m Message
		if m.UnmarshalBinary(r.Value) != nil || !c.b.mayRead(c.client, c.id.Username, r.ID) {
			return true
		}
		var ids []uint32
		if s.ID != 0 {
			ids = []uint32{s.ID}
		}
		c.out.offer(direct{msg: &m, qos: min(m.QoS, s.QoS), ids: ids, retain: true})
		return true
	})
}

func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) bool {
	o := c.out
	ack := &packet.Unsuback{PacketID: p.PacketID, ReasonCodes: make([]packet.ReasonCode, len(p.Filters))}
	o.mu.Lock()
	for i, f := range p.Filters {
		group, filter := "", f
		if sh, shared, err := topic.ParseShared(f); shared && err == nil {
			group, filter = sh.Group, sh.Filter
		}
		ack.ReasonCodes[i] = packet.NoSubscriptionExisted
		for j := range o.subs {
			if o.subs[j].Filter == filter && o.subs[j].Group == group {
				o.subs = append(o.subs[:j], o.subs[j+1:]...)
				if group == "" {
					delete(o.since, filter)
				}
				c.b.index.Remove(c.client, group, filter)
				ack.ReasonCodes[i] = packet.Success
				break
			}
		}
	}
	o.mu.Unlock()
	h, err := c.persistSubs()
	if err != nil {
		return false
	}
	return c.ack(ackEntry{pkt: ack, h: h, kind: KindSession})
}
