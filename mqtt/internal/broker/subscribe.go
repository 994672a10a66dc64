package broker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
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
	var added []newSub
	// A new subscription matches the messages committed after this point
	// only; those before it reach the client as retained messages or not
	// at all.
	//
	// A SUBSCRIBE that came with the CONNECT (its record rides on this
	// commit) starts at the head the CONNECT read: it was received before
	// that head was taken, so any message committed after it is
	// concurrent with the SUBSCRIBE, and the store is spared a read.
	head := c.connectHead
	var err error
	if c.pendingConnack == nil {
		c.b.onStore(func() { head, err = c.b.head(c.ctx) })
	}
	if err != nil {
		c.flushConnack()
		c.log.Warn("subscribe: log head", "err", err)
		c.disconnect(packet.UnspecifiedError, "store unavailable")
		return false
	}
	// Replays are resolved and their readers opened before the session's
	// lock: they read the store.
	replays, filters := c.replayRequests(p, ack)
	var started []*delivery.Replay
	var tableWhy []string
	anyShared := false
	// Every filter is checked first, then all are added under one hold
	// of the session's lock (see delivery.Session.AddSubscriptions).
	var reqs []delivery.NewSubscription
	var at []int // the index in p of each of reqs
	for i, req := range p.Subscriptions {
		if ack.ReasonCodes[i] != 0 {
			continue // a refused replay
		}
		s := topic.Subscription{Client: c.client, Filter: filters[i], QoS: byte(req.QoS), NoLocal: req.NoLocal,
			RetainAsPublished: req.RetainAsPublished, RetainHandling: byte(req.RetainHandling), ID: subID}
		sh, shared, err := topic.ParseShared(s.Filter)
		if rc, terr := c.checkTableFilter(s.Filter, sh, shared); terr != nil {
			ack.ReasonCodes[i] = rc
			tableWhy = append(tableWhy, terr.Error())
			continue
		}
		switch {
		case err != nil || !topic.ValidFilter(s.Filter) || c.b.checkTopic(s.Filter) != nil:
			ack.ReasonCodes[i] = packet.TopicFilterInvalid
			continue
		case shared && req.NoLocal && c.version == packet.V5:
			for _, rp := range replays {
				if rp != nil {
					rp.End()
				}
			}
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
		reqs = append(reqs, delivery.NewSubscription{Sub: s, Replay: replays[i]})
		at = append(at, i)
	}
	existed, ok := o.AddSubscriptions(reqs, head, c.b.subscriptionAllowed)
	for k, ns := range reqs {
		i := at[k]
		if !ok[k] {
			ack.ReasonCodes[i] = packet.QuotaExceeded
			continue
		}
		if ns.Replay != nil {
			c.b.metrics.ReplaysStarted.Add(1)
			started = append(started, ns.Replay)
			replays[i] = nil
		}
		added = append(added, newSub{ns.Sub, existed[k], ns.Replay != nil})
		ack.ReasonCodes[i] = packet.ReasonCode(ns.Sub.QoS)
	}
	for _, rp := range replays {
		if rp != nil {
			rp.End() // its subscription was refused
		}
	}
	// The replays read at least up to the router's frontier once the
	// filters are in the index: messages routed after it reach the
	// session (and are held back while the replay runs), those before it
	// only the replay delivers. The frontier is a message's position, so
	// the replay's reader reaches it exactly; only before the router has
	// routed its first message is it the log head at startup, which may
	// be another table's entry: the handover then waits for the next
	// message, and the replay delivers until then.
	var until table.Cursor
	if len(started) > 0 {
		until = c.b.router.Frontier().Of(0) // replays read the first partition
	}
	if len(tableWhy) > 0 && c.version == packet.V5 {
		addReason(&ack.Properties, strings.Join(tableWhy, "; "))
	}
	if c.version == packet.V311 {
		for i, rc := range ack.ReasonCodes {
			if rc.IsError() {
				ack.ReasonCodes[i] = 0x80 // the only 3.1.1 failure code
			}
		}
	}
	// The retained messages the new subscriptions receive are read in the
	// store call that submits the record, not after the SUBACK: one store
	// call instead of one per filter. They still go out after the SUBACK;
	// one replaced or cleared meanwhile is a publish concurrent with this
	// SUBSCRIBE, and a replacement reaches the filter live as well.
	wants := make([]bool, len(added))
	anyRetained := false
	for i, a := range added {
		wants[i] = !a.replay && !(c.b.tables.Contains(a.s.Filter) && a.s.Group == "") && wantsRetained(a.s, a.existed)
		anyRetained = anyRetained || wants[i]
	}
	var retained []retainedOffer
	h, err := c.persistSubsThen(func() {
		if anyRetained {
			retained = c.readRetained(added, wants)
		}
	})
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
		// Replayed messages follow the SUBACK; meanwhile the live ones
		// for their filters are held back.
		for _, rp := range started {
			o.RunReplay(rp, until)
		}
		for i, a := range added {
			switch {
			case c.b.tables.Contains(a.s.Filter) && a.s.Group == "":
				c.out.SubscribeTable(a.s, a.existed)
			case retained != nil: // a replay's history comes from the log
				c.out.OfferRetained(retained[i].ds, retained[i].more)
			}
		}
	}, kind: KindSession})
}

// newSub is a subscription a SUBSCRIBE added or replaced.
type newSub struct {
	s       topic.Subscription
	existed bool
	replay  bool
}

// replayRequests reads the replay asked for by each subscription of p
// (ReplayPrefix on its filter, or PropReplayFrom on the packet), checks
// it against retention and opens its reader. It returns the readers and
// the filters without their prefix; a refused replay gets its reason code
// (and reason string, and PropOldestPosition) in ack.
func (c *conn) replayRequests(p *packet.Subscribe, ack *packet.Suback) ([]*delivery.Replay, []string) {
	var prop string
	hasProp := false
	if c.version == packet.V5 {
		for _, u := range p.Properties.User {
			if u.Key == PropReplayFrom {
				prop, hasProp = u.Value, true
			}
		}
	}
	now := time.Now()
	replays := make([]*delivery.Replay, len(p.Subscriptions))
	filters := make([]string, len(p.Subscriptions))
	var why []string
	refuse := func(i int, rc packet.ReasonCode, err error) {
		ack.ReasonCodes[i] = rc
		why = append(why, err.Error())
		var te *truncatedError
		if errors.As(err, &te) && c.version == packet.V5 {
			ack.Properties.AddUser(PropOldestPosition, te.oldest.String())
		}
	}
	for i, req := range p.Subscriptions {
		from, filter, prefixed, err := cutReplayPrefix(req.Filter)
		filters[i] = filter
		if err != nil {
			refuse(i, packet.TopicFilterInvalid, err)
			continue
		}
		if !prefixed && !hasProp {
			continue
		}
		if !prefixed {
			from = prop
		}
		if _, shared, _ := topic.ParseShared(filter); shared {
			refuse(i, packet.ImplementationSpecificError, errors.New("replay is not available on a shared subscription: subscribe without $share"))
			continue
		}
		if !topic.ValidFilter(filter) {
			continue // refused as an invalid filter
		}
		if c.b.tables.Contains(filter) {
			refuse(i, packet.ImplementationSpecificError, fmt.Errorf("replay is not available under the tables prefix %q: a table subscription starts with the current records", c.b.opts.TablesPrefix))
			continue
		}
		if c.b.split() {
			refuse(i, packet.ImplementationSpecificError, errors.New("replay is not available on a broker whose message log is split over partitions: subscribe without a replay"))
			continue
		}
		rs, err := parseReplayFrom(from, now)
		if err == nil {
			err = c.b.resolveReplay(c.ctx, from, rs)
		}
		var rp *delivery.Replay
		if err == nil {
			rp, err = c.out.StartReplay(filter, rs.after, rs.since)
		}
		if err != nil {
			c.b.metrics.ReplaysRefused.Add(1)
			c.log.Info("replay refused", "filter", filter, "from", from, "err", err)
			refuse(i, packet.ImplementationSpecificError, err)
			continue
		}
		replays[i] = rp
	}
	if len(why) > 0 && c.version == packet.V5 {
		reason := why[0]
		for _, w := range why[1:] {
			reason += "; " + w
		}
		ack.Properties.SetReasonString(reason)
	}
	return replays, filters
}

// persistSubs submits the session record with the current subscriptions.
func (c *conn) persistSubs() (*engine.Handle, error) {
	return c.persistSubsThen(nil)
}

// persistSubsThen is persistSubs, running then (if set) in the same store
// call once the record is submitted.
func (c *conn) persistSubsThen(then func()) (*engine.Handle, error) {
	c.b.beforeSubmit(KindSession, c.client)
	var h *engine.Handle
	var err error
	c.out.LockRecord()
	defer c.out.UnlockRecord()
	c.b.onStore(func() {
		var tx *table.Tx
		if tx, err = c.out.SessionTx(); err != nil {
			c.fail(err)
			return
		}
		if h, err = c.submit(tx); err == nil && then != nil {
			then()
		}
	})
	return h, err
}

// wantsRetained reports whether subscription s receives the retained
// messages matching it, per its retain handling; shared subscriptions get
// none [MQTT-3.8.4-? / 5.0 4.8.2].
func wantsRetained(s topic.Subscription, existed bool) bool {
	return s.Group == "" && s.RetainHandling != byte(packet.DoNotSendRetained) &&
		(s.RetainHandling != byte(packet.SendRetainedIfNew) || !existed)
}

// retainedPageSize is how many retained messages a page of a wildcard
// subscription's retained set reads, matching the filter or not: a
// SUBSCRIBE reads the first page, and the session's sender reads each
// next one once it has sent the last (see delivery.RetainedPages), so
// a subscription matching millions holds one page in memory.
const retainedPageSize = 256

// retainedOffer is what one subscription of a SUBSCRIBE is offered of the
// retained messages: those read already, and the reader of the pages
// that follow (nil when there are none).
type retainedOffer struct {
	ds   []delivery.Direct
	more delivery.RetainedPages
}

// readRetained reads the retained messages matching each subscription of
// added whose wants is set, as they are to be offered: a filter without
// wildcards names one topic, one lookup; a wildcard filter's retained
// set is read in pages of retainedPageSize, the first one here. A store
// call (see onStore); a read that fails offers nothing more for its
// filter.
//
// Each read is consistent by itself and reads no snapshot for a lookup
// (a snapshot per SUBSCRIBE would cost a fleet's setup); a filter's
// retained messages owe nothing to another filter's, and a page's to the
// page before: one replaced or cleared between pages is a publish
// concurrent with the SUBSCRIBE.
func (c *conn) readRetained(added []newSub, wants []bool) []retainedOffer {
	c.b.retains.wait(c.ctx)
	out := make([]retainedOffer, len(added))
	for i, a := range added {
		if !wants[i] {
			continue
		}
		s := a.s
		if !strings.ContainsAny(s.Filter, "+#") {
			if r, _, err := c.b.parts.GetLatest(c.ctx, tableRetained, s.Filter); err == nil {
				if d, ok := c.retainedDirect(s, r); ok {
					out[i].ds = []delivery.Direct{d}
				}
			}
			continue
		}
		ds, at, more, err := c.retainedPage(s, retainedAt{})
		if err != nil {
			continue
		}
		out[i].ds = ds
		if more {
			out[i].more = c.retainedPages(s, at)
		}
	}
	return out
}

// retainedAt is where a wildcard subscription's read of the retained
// messages stands: after the record last of partition part (from the
// first record when last is empty).
type retainedAt struct {
	part int
	last string
}

// retainedPages reads the pages of s's retained messages after at, each
// as a store call on the session's sender.
func (c *conn) retainedPages(s topic.Subscription, at retainedAt) delivery.RetainedPages {
	return func() ([]delivery.Direct, bool) {
		var ds []delivery.Direct
		more := false
		var err error
		c.b.onStore(func() { ds, at, more, err = c.retainedPage(s, at) })
		if err != nil {
			if c.ctx.Err() == nil {
				c.b.log.Warn("reading retained messages failed; the rest of the filter's are not sent",
					"client", c.client, "filter", s.Filter, "err", err)
			}
			return nil, false
		}
		return ds, more
	}
}

// retainedPage reads the page of s's retained messages after at: those
// of the next retainedPageSize records under the filter's prefix that
// match it, where the next page starts, and whether more may follow.
//
// On a split store each partition is read in turn, in its engine's
// order (ids too long for the key sort only by their first bytes, see
// table.DB.Range, so pages of several partitions cannot be merged by
// id), and a topic is offered from the partition holding its newest copy
// only: a record with a newer copy in another partition (a retained
// message of a publisher of another partition, or a clear's marker) is
// passed over, that partition's read offering the topic.
func (c *conn) retainedPage(s topic.Subscription, at retainedAt) (ds []delivery.Direct, next retainedAt, more bool, err error) {
	for {
		n := 0
		next = at
		err = c.b.parts.DB(at.part).RangeAfter(c.ctx, tableRetained, retainedPrefix(s.Filter), at.last, func(r table.Record) bool {
			n++
			next.last = r.ID
			if c.b.split() && c.newerElsewhere(at.part, r) {
				return n < retainedPageSize
			}
			if d, ok := c.retainedDirect(s, r); ok {
				ds = append(ds, d)
			}
			return n < retainedPageSize
		})
		switch {
		case err != nil:
			return nil, at, false, err
		case n == retainedPageSize:
			return ds, next, true, nil
		case at.part+1 == c.b.parts.Count():
			return ds, next, false, nil
		}
		// This partition is read: on to the next, in this page while
		// it has nothing to offer yet.
		at = retainedAt{part: at.part + 1}
		if len(ds) > 0 {
			return ds, at, true, nil
		}
	}
}

// newerElsewhere reports whether a partition other than part holds a
// newer copy of the retained record r (see retainedPage). A failed read
// counts as none: this copy is offered.
func (c *conn) newerElsewhere(part int, r table.Record) bool {
	for i := range c.b.parts.Count() {
		if i == part {
			continue
		}
		o, err := c.b.parts.DB(i).Get(c.ctx, tableRetained, r.ID)
		if err == nil && o.Version > r.Version {
			return true
		}
	}
	return false
}

// retainedDirect is retained record r as a delivery to s, unless r does
// not match s or the client may not read its topic.
func (c *conn) retainedDirect(s topic.Subscription, r table.Record) (delivery.Direct, bool) {
	if r.Deleted || !topic.Match(s.Filter, r.ID) {
		return delivery.Direct{}, false
	}
	var m Message
	if m.UnmarshalBinary(r.Value) != nil || len(m.Payload) == 0 || !c.b.guard.MayRead(c.ctx, c.client, c.id.Username, r.ID) {
		// An empty payload is a cleared topic's marker (see addRetained).
		return delivery.Direct{}, false
	}
	var ids []uint32
	if s.ID != 0 {
		ids = []uint32{s.ID}
	}
	return delivery.Direct{Msg: &m, QoS: min(m.QoS, s.QoS), IDs: ids, Retain: true}, true
}

// retainedPrefix is the longest topic prefix every topic matching the
// wildcard filter f starts with: the levels before its first wildcard,
// without the separator after them, since "a/#" matches "a" too.
func retainedPrefix(f string) string {
	i := strings.IndexAny(f, "+#")
	return strings.TrimSuffix(f[:i], "/")
}

func (c *conn) handleUnsubscribe(p *packet.Unsubscribe) bool {
	ack := &packet.Unsuback{PacketID: p.PacketID, ReasonCodes: make([]packet.ReasonCode, len(p.Filters))}
	for i, f := range p.Filters {
		group, filter := "", f
		if sh, shared, err := topic.ParseShared(f); shared && err == nil {
			group, filter = sh.Group, sh.Filter
		}
		ack.ReasonCodes[i] = packet.NoSubscriptionExisted
		if c.out.RemoveSubscription(group, filter) {
			ack.ReasonCodes[i] = packet.Success
		}
	}
	h, err := c.persistSubs()
	if err != nil {
		return false
	}
	return c.ack(ackEntry{pkt: ack, h: h, kind: KindSession})
}
