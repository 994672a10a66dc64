// Package route is the broker's delivery path from the message log to the
// online sessions: one follower of the log per node, which reads each
// committed message once and hands it, through the subscription index, to
// the sessions it matches. Routing a message costs what its matches cost,
// whatever the number of sessions.
//
// The log may be split over partitions (table.Partitions): the router then
// follows every partition's log, each on its own routing path, and a
// session on the route is a table.PartitionMember of the router's
// PartitionFanout, one member per partition. A session behind the log (it
// just reconnected, or it is too slow for the route's queue) reads each
// partition's log itself from its checkpoint and joins the route once it
// has caught up; table.Fanout keeps that switch free of gaps and
// duplicates in each partition. Messages for shared subscription groups are not
// delivered through members: the router hands the matching subscriptions
// (one per group, as the index picks them) to the broker, which offers the
// message to the chosen session's queue.
package route

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Options configures a Router.
type Options struct {
	// Table is the message log's table: a record id is its topic.
	Table string
	// Start is where the router starts reading, per partition (the log
	// head, usually).
	Start logpos.Vec
	// MaxQueue is how many routed messages a session may hold unreceived
	// before it leaves the route to catch up on its own (see
	// table.FanoutOptions).
	MaxQueue int
	// Observe, if set, sees every message first, with its partition, on
	// that partition's routing goroutine; it must not block. Partitions
	// route concurrently.
	Observe func(part int, ev table.Event)
	// Shared receives a message's matching shared subscriptions, once
	// Router.StartShared was called, with the message's partition, on the
	// partition's routing goroutine and with no lock of the router held;
	// it must not block. subs is reused after it returns.
	Shared func(part int, ev table.Event, subs []topic.Subscription)
	// Offline, if set, calls fn with one offline member of each shared
	// subscription whose filter matches topic (see Router.route): its
	// groups get their messages through Shared too while no member of
	// theirs is online here.
	Offline func(topic string, fn func(topic.Subscription))
	// Logger receives the follower's warnings.
	Logger *slog.Logger
}

// Router follows the message log and routes each message to the online
// sessions whose subscriptions match it. Its index holds the subscriptions
// of the online sessions; a session gets routed messages once it joined.
//
// A Router is safe for concurrent use.
type Router struct {
	index    topic.Index
	fan      *table.PartitionFanout
	observe  func(int, table.Event)
	onShared func(int, table.Event, []topic.Subscription)
	offline  func(string, func(topic.Subscription))

	mu      sync.Mutex
	members map[string]*table.PartitionMember // online session -> its member

	// sharedOn is set once any shared subscription exists: until then no
	// message has a shared subscriber, and routing collects none.
	sharedOn atomic.Bool

	// scratch holds each partition's routing space: partitions route
	// concurrently, each on its own goroutine.
	scratch []scratch
}

// scratch is one partition's routing goroutine's scratch space.
type scratch struct {
	plain  []string
	shared []topic.Subscription
}

// Start starts a router on the message log of parts until ctx ends or
// Close.
func Start(ctx context.Context, parts *table.Partitions, o Options) (*Router, error) {
	if o.Start.Len() != parts.Count() {
		return nil, fmt.Errorf("route: start at %v: %d partitions, the log has %d: %w", o.Start, o.Start.Len(), parts.Count(), table.ErrBadCursor)
	}
	r := &Router{observe: o.Observe, onShared: o.Shared, offline: o.Offline, members: map[string]*table.PartitionMember{},
		scratch: make([]scratch, parts.Count())}
	var err error
	r.fan, err = parts.NewFanout(ctx, table.PartitionFanoutOptions{
		Table: o.Table, Start: o.Start.Cursors(), Route: r.route, MaxQueue: o.MaxQueue, Logger: o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("route: start: %w", err)
	}
	return r, nil
}

// Close stops the router; members get nothing more from it.
func (r *Router) Close() error { return r.fan.Close() }

// Index is the subscription index the router matches messages against.
// Sessions add their subscriptions as they come online or subscribe and
// remove them as they unsubscribe or go.
func (r *Router) Index() *topic.Index { return &r.index }

// StartShared turns on the routing of messages to shared subscription
// groups (see Options.Shared). Call it before adding the first shared
// subscription to the index, or the messages routed in between miss it.
func (r *Router) StartShared() { r.sharedOn.Store(true) }

// Frontier holds, per partition, a cursor every message the router has
// routed from that partition is covered by.
func (r *Router) Frontier() logpos.Vec {
	v, _ := logpos.FromCursors(r.fan.Frontier()) // one cursor per partition, as Start checked
	return v
}

// Member makes a member for a session that catches up from the log from
// from (per partition), taking the messages wants accepts, and then
// receives them as the router routes them; wake is called when it has
// something to receive. It gets routed messages once Join put it on the
// route.
func (r *Router) Member(from logpos.Vec, wants func(table.Event) bool, wake func()) (*table.PartitionMember, error) {
	return r.fan.JoinFunc(from.Cursors(), wants, wake)
}

// Join puts m, a member of client's session, on the route, in place of
// the member of an earlier connection of client.
func (r *Router) Join(client string, m *table.PartitionMember) {
	r.mu.Lock()
	r.members[client] = m
	r.mu.Unlock()
}

// Leave takes m, client's member, off the route, unless another
// connection of client replaced it already. The caller closes m.
func (r *Router) Leave(client string, m *table.PartitionMember) {
	r.mu.Lock()
	if r.members[client] == m {
		delete(r.members, client)
	}
	r.mu.Unlock()
}

// Online reports whether client has a member on the route.
func (r *Router) Online(client string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.members[client] != nil
}

// route hands one log message of partition part to the members it
// matches and its shared subscriptions to Options.Shared. On the
// partition's routing goroutine only: its scratch slices are its own.
func (r *Router) route(part int, ev table.Event, deliver func(*table.PartitionMember)) {
	if r.observe != nil {
		r.observe(part, ev)
	}
	sc := &r.scratch[part]
	sc.plain, sc.shared = sc.plain[:0], sc.shared[:0]
	sharedOn := r.sharedOn.Load() && r.onShared != nil
	// The record id of a log message is its topic: plain routing needs
	// no decoding.
	r.index.Match(ev.ID, func(s topic.Subscription) {
		switch {
		case s.Group == "":
			sc.plain = append(sc.plain, s.Client)
		case sharedOn:
			sc.shared = append(sc.shared, s)
		}
	})
	if sharedOn && r.offline != nil {
		// Groups with no member online here: their offline member
		// stands for them, so the broker can keep the message for the
		// group.
		online := len(sc.shared)
		r.offline(ev.ID, func(s topic.Subscription) {
			for _, o := range sc.shared[:online] {
				if o.Group == s.Group && o.Filter == s.Filter {
					return
				}
			}
			sc.shared = append(sc.shared, s)
		})
	}
	if len(sc.plain) > 0 {
		r.mu.Lock()
		for _, client := range sc.plain {
			if m := r.members[client]; m != nil {
				deliver(m)
			}
		}
		r.mu.Unlock()
	}
	if len(sc.shared) > 0 {
		r.onShared(part, ev, sc.shared)
	}
}
