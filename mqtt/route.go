package mqtt

import (
	"context"
	"fmt"

	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The router is the broker's one follower of the message log: it reads
// each committed QoS 1/2 message once and hands it, through the
// subscription index, to the online sessions it matches (their
// table.Member) and to one member of each matching shared group. Routing
// a message therefore costs what its matches cost, whatever the number
// of sessions. A session behind the log (a reconnect, a slow subscriber)
// reads the log itself from its checkpoint and joins the route once it has
// caught up; table.Fanout keeps that switch free of gaps and duplicates.

// startRouter starts the router at the log's head.
func (b *Broker) startRouter(ctx context.Context) error {
	head, err := b.db.Head(ctx)
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	if b.rules != nil {
		b.rules.Start(head) // the router reads what follows
	}
	b.fan, err = b.db.NewFanout(b.ctx, table.FanoutOptions{
		Table: tableMsgs, Start: head, Route: b.route, MaxQueue: b.opts.RouteQueue, Logger: b.log,
	})
	if err != nil {
		return fmt.Errorf("mqtt: start the router: %w", err)
	}
	return nil
}

// route hands one log message to the sessions it matches. Router only:
// the scratch slices are its own.
func (b *Broker) route(ev table.Event, deliver func(*table.Member)) {
	b.rules.Observe(ev)
	b.plain, b.shared = b.plain[:0], b.shared[:0]
	sharedOn := b.sharedStarted.Load()
	// The record id of a log message is its topic: plain routing needs
	// no decoding.
	b.index.Match(ev.ID, func(s topic.Subscription) {
		switch {
		case s.Group == "":
			b.plain = append(b.plain, s.Client)
		case sharedOn:
			b.shared = append(b.shared, s)
		}
	})
	if len(b.plain) > 0 {
		b.mu.Lock()
		for _, client := range b.plain {
			if m := b.members[client]; m != nil {
				deliver(m)
			}
		}
		b.mu.Unlock()
	}
	if len(b.shared) == 0 {
		return
	}
	var m Message
	if m.decodeEvent(ev.Value, ev.ID) != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.shared {
		if s.NoLocal && s.Client == m.From {
			continue
		}
		c := b.conns[s.Client]
		if c == nil || b.members[s.Client] == nil || !b.allow(b.ctx, c.id, AccessRead, m.Topic) {
			continue
		}
		var ids []uint32
		if s.ID != 0 {
			ids = []uint32{s.ID}
		}
		c.out.offer(direct{msg: &m, qos: min(s.QoS, m.QoS), ids: ids, retain: m.Retain && s.RetainAsPublished})
	}
}

// join puts a session's member on the router's table of online sessions.
func (b *Broker) join(client string, m *table.Member) {
	b.mu.Lock()
	b.members[client] = m
	b.mu.Unlock()
}

// leave takes client's member off it, unless another connection of the
// client replaced it already.
func (b *Broker) leave(client string, m *table.Member) {
	b.mu.Lock()
	if b.members[client] == m {
		delete(b.members, client)
	}
	b.mu.Unlock()
}
