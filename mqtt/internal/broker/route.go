package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/route"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The router (route.Router) is the broker's one follower of the message
// log: it reads each committed QoS 1/2 message once and hands it, through
// the subscription index, to the online sessions it matches and, here, to
// one member of each matching shared group.

// startRouter starts the router at the log's head.
func (b *Broker) startRouter(ctx context.Context) error {
	head, err := b.head(ctx)
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	var observe func(int, table.Event)
	if b.rules != nil {
		// A store of one partition (see checkPartitioned).
		b.rules.Start(head.Of(0)) // the router reads what follows
		observe = func(_ int, ev table.Event) { b.rules.Observe(ev) }
	}
	b.router, err = route.Start(b.ctx, b.parts, route.Options{
		Table: tableMsgs, Start: head, MaxQueue: b.opts.RouteQueue,
		Observe: observe, Shared: b.routeShared, Offline: b.offline.match, Logger: b.log,
	})
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	return nil
}

// routeShared offers a log message to the sessions the router chose for
// its shared subscription groups. On the router's goroutine.
func (b *Broker) routeShared(part int, ev table.Event, subs []topic.Subscription) {
	var m Message
	if m.DecodeEvent(ev.Value, ev.ID) != nil {
		return
	}
	b.mu.Lock()
	for _, s := range subs {
		if (s.NoLocal && s.Client == m.From) || !b.servesShare(ev, s) {
			continue
		}
		b.offerShareLocked(&m, s, "", false, delivery.LogPos{Key: ev.Key, Index: ev.Index, Part: uint8(part), Set: true})
	}
	queued := len(b.shareQ) > 0
	b.mu.Unlock()
	if queued {
		b.flushShareQueue()
	}
}

// offerShareLocked offers m to pick, the member of its share the index
// chose, or, when pick cannot take it (gone, not allowed to read the
// topic, its queue of in-memory deliveries full), to the share's other
// online members in turn, passing over exclude (a member that is
// leaving). With force, when every queue is full, the first member that
// may take it gets it past its queue's bound. With no member online, it
// goes to the share's queue when the share has offline members (see
// sharequeue.go; pos is m's log position, unset when unknown). A message
// none takes is counted dropped as slow. b.mu held.
//
// While a member takes the share's queue over (drainShare), m joins the
// queue behind what is there, so the group gets its messages in log
// order.
func (b *Broker) offerShareLocked(m *Message, pick topic.Subscription, exclude string, force bool, pos delivery.LogPos) bool {
	if m.QoS > 0 {
		sh := topic.Share{Group: pick.Group, Filter: pick.Filter}
		if _, draining := b.draining[sh]; draining && b.queueShareLocked(m, sh, pos) {
			return true
		}
	}
	return b.offerShareLiveLocked(m, pick, exclude, force, pos)
}

// offerShareLiveLocked is offerShareLocked past the queue. b.mu held.
func (b *Broker) offerShareLiveLocked(m *Message, pick topic.Subscription, exclude string, force bool, pos delivery.LogPos) bool {
	if pick.Client != exclude && b.offerMemberLocked(m, pick, true, pos) {
		return true // the common case: the group's members are not read
	}
	members := b.router.Index().Members(topic.Share{Group: pick.Group, Filter: pick.Filter})
	start := slices.IndexFunc(members, func(s topic.Subscription) bool { return s.Client == pick.Client })
	bounds := []bool{true}
	if force {
		bounds = append(bounds, false)
	}
	for _, bound := range bounds {
		if !bound && pick.Client != exclude && b.offerMemberLocked(m, pick, bound, pos) {
			return true
		}
		for i := 1; i <= len(members); i++ {
			s := members[(start+i+len(members))%len(members)]
			if s.Client != exclude && s.Client != pick.Client && b.offerMemberLocked(m, s, bound, pos) {
				return true
			}
		}
	}
	online := slices.ContainsFunc(members, func(s topic.Subscription) bool {
		return s.Client != exclude && b.memberOnlineLocked(s.Client)
	})
	sh := topic.Share{Group: pick.Group, Filter: pick.Filter}
	if !online && b.queueShareLocked(m, sh, pos) {
		return true
	}
	b.metrics.DroppedSlow.Add(1)
	return false
}

// memberOnlineLocked reports whether client's session is online here
// and on the route. b.mu held.
func (b *Broker) memberOnlineLocked(client string) bool { return b.onlineMemberLocked(client) != nil }

// onlineMemberLocked returns client's connection when its session is
// online here and on the route, nil otherwise. b.mu held.
func (b *Broker) onlineMemberLocked(client string) *conn {
	if c := b.conns[client]; c != nil && c.out != nil && b.router.Online(client) {
		return c
	}
	return nil
}

// offerMemberLocked queues m for s's session, reporting false when it is
// not online here, may not read m's topic, or (with bound) has no room.
// b.mu held.
func (b *Broker) offerMemberLocked(m *Message, s topic.Subscription, bound bool, pos delivery.LogPos) bool {
	c := b.onlineMemberLocked(s.Client)
	if c == nil || !b.guard.Allow(b.ctx, c.id, auth.AccessRead, m.Topic) {
		return false
	}
	var ids []uint32
	if s.ID != 0 {
		ids = []uint32{s.ID}
	}
	d := delivery.Direct{Msg: m, QoS: min(s.QoS, m.QoS), IDs: ids, Retain: m.Retain && s.RetainAsPublished,
		Share: topic.Share{Group: s.Group, Filter: s.Filter}}
	d.At = pos
	if !bound {
		c.out.OfferOwed(d)
		return true
	}
	return c.out.TryOffer(d)
}

// reofferShared offers what client's ended session owed its shared
// subscriptions and will not deliver (delivery.Session.Unsent) to the
// online members of each share but leaving (client, unless a newer
// connection of it took over), so that a member's disconnect does not
// lose them for the group. QoS 1 ones it had sent and not seen
// acknowledged go again, to another member: at least once.
func (b *Broker) reofferShared(client, leaving string, ds []delivery.Direct) {
	if len(ds) == 0 {
		return
	}
	dropped := map[topic.Share]int{}
	defer func() { // after the unlock
		b.flushShareQueue()
		for sh, n := range dropped {
			b.log.Warn("shared subscription messages dropped: the member that held them left and no other member is online", "group", sh.Group, "filter", sh.Filter, "messages", n, "leaving", client)
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range ds {
		if d.Msg.Expired(time.Now()) {
			continue
		}
		members := b.router.Index().Members(d.Share)
		if len(members) == 0 {
			if b.queueShareLocked(d.Msg, d.Share, d.At) {
				continue // the group's queue keeps it for its next member
			}
			b.metrics.DroppedNoMember.Add(1)
			dropped[d.Share]++
			continue
		}
		// The rotation goes on from client (a newer connection of it
		// first, with its subscription's QoS), or from the first member.
		pick := members[0]
		if i := slices.IndexFunc(members, func(s topic.Subscription) bool { return s.Client == client }); i >= 0 {
			pick = members[i]
		}
		// Past the queues' bound if need be: these are owed to the group
		// and in memory already, at most a queue and a window of them.
		b.offerShareLocked(d.Msg, pick, leaving, true, d.At)
	}
}
