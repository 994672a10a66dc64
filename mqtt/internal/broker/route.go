package broker

import (
	"context"
	"fmt"

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
	head, err := b.db.Head(ctx)
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	var observe func(table.Event)
	if b.rules != nil {
		b.rules.Start(head) // the router reads what follows
		observe = b.rules.Observe
	}
	b.router, err = route.Start(b.ctx, b.db, route.Options{
		Table: tableMsgs, Start: head, MaxQueue: b.opts.RouteQueue,
		Observe: observe, Shared: b.routeShared, Logger: b.log,
	})
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	return nil
}

// routeShared offers a log message to the sessions the router chose for
// its shared subscription groups. On the router's goroutine.
func (b *Broker) routeShared(ev table.Event, subs []topic.Subscription) {
	var m Message
	if m.DecodeEvent(ev.Value, ev.ID) != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range subs {
		if (s.NoLocal && s.Client == m.From) || !b.servesShare(ev, s) {
			continue
		}
		c := b.conns[s.Client]
		if c == nil || !b.router.Online(s.Client) || !b.guard.Allow(b.ctx, c.id, auth.AccessRead, m.Topic) {
			continue
		}
		var ids []uint32
		if s.ID != 0 {
			ids = []uint32{s.ID}
		}
		c.out.Offer(delivery.Direct{Msg: &m, QoS: min(s.QoS, m.QoS), IDs: ids, Retain: m.Retain && s.RetainAsPublished})
	}
}
