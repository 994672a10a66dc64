package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// In-process publish and subscribe, for an application that embeds the
// broker: no socket, no access checks, and the same durable path as an
// MQTT client's messages (the message log and its router).

// ErrInvalidTopic reports a topic name or filter the broker cannot use.
var ErrInvalidTopic = errors.New("mqtt: invalid topic")

// Publish publishes m as a client would, without access checks
// (mqtt.Broker.Publish).
func (b *Broker) Publish(ctx context.Context, m Message) error {
	if !topic.ValidName(m.Topic) || m.Topic == "" {
		return fmt.Errorf("%w: %q: a topic name has no wildcards and is not empty", ErrInvalidTopic, m.Topic)
	}
	if err := b.checkTopic(m.Topic); err != nil {
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	if m.QoS > 2 {
		return fmt.Errorf("%w: QoS %d: use 0, 1 or 2", ErrInvalidTopic, m.QoS)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	if m.Expired(time.Now()) {
		return nil
	}
	if b.tables.Contains(m.Topic) {
		return b.publishTable(ctx, &m)
	}
	if m.QoS == 0 {
		b.publishQoS0(ctx, &m, true)
		return nil
	}
	tx := b.dbFor(m.From).Begin()
	if err := b.addMessage(tx, &m); err != nil {
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	return nil
}

// Delivery is mqtt.Delivery, which documents it; either converts to the
// other.
type Delivery struct {
	Message
	Position string
}

// SubscribeOptions is mqtt.SubscribeOptions, which documents it; either
// converts to the other.
type SubscribeOptions struct {
	From string
}

// Subscription is an in-process subscription (mqtt.Subscription).
type Subscription struct {
	sub  logSubscription
	done chan struct{}
	err  error
}

// logSubscription is a subscription to the message log: of its one
// partition (*table.Subscription) or of all of them
// (*table.PartitionSubscription).
type logSubscription interface {
	Events() <-chan table.Event
	Ack(table.Event) error
	Close() error
	Err() error
}

// Subscribe follows the message log for filter in process
// (mqtt.Broker.Subscribe).
func (b *Broker) Subscribe(ctx context.Context, filter string, o SubscribeOptions, handler func(Delivery) error) (*Subscription, error) {
	if !topic.ValidFilter(filter) || filter == "" {
		return nil, fmt.Errorf("%w: filter %q", ErrInvalidTopic, filter)
	}
	if b.tables.Contains(filter) {
		return nil, fmt.Errorf("%w: filter %q is under the tables prefix %q: subscribe to the table with table.DB.Subscribe", ErrTableTopic, filter, b.opts.TablesPrefix)
	}
	filterFn := func(ev table.Event) bool { return topic.Match(filter, ev.ID) }
	if b.split() {
		if o.From != "" {
			return nil, fmt.Errorf("mqtt: subscribe %q from %q: replay is not available on a broker whose message log is split over partitions: %w",
				filter, o.From, engine.ErrInvalidOption)
		}
		head, err := b.parts.Head(ctx)
		if err != nil {
			return nil, fmt.Errorf("mqtt: subscribe %q: %w", filter, err)
		}
		ps, err := b.parts.Subscribe(ctx, head, table.SubscribeOptions{Table: tableMsgs, IncludeSuperseded: true, Composite: true, Filter: filterFn})
		if err != nil {
			return nil, fmt.Errorf("mqtt: subscribe %q: %w", filter, err)
		}
		return b.runSubscription(ps, func(ev table.Event) string { return logpos.At(ps.Partition(ev), ev.Cursor()).String() }, handler), nil
	}
	start := replayStart{}
	if o.From == "" {
		head, err := b.db.Head(ctx)
		if err != nil {
			return nil, fmt.Errorf("mqtt: subscribe %q: %w", filter, err)
		}
		start.after = head
	} else {
		rs, err := parseReplayFrom(o.From, time.Now())
		if err != nil {
			return nil, err
		}
		if err := b.resolveReplay(ctx, o.From, rs); err != nil {
			return nil, err
		}
		start = rs
	}
	since := start.since
	sub, err := b.db.Subscribe(ctx, table.SubscribeOptions{
		Table: tableMsgs, Start: start.after, IncludeSuperseded: true, Composite: true,
		Filter: func(ev table.Event) bool {
			return filterFn(ev) && (since.IsZero() || !ev.Version.Time().Before(since))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("mqtt: subscribe %q: %w", filter, err)
	}
	return b.runSubscription(sub, func(ev table.Event) string { return ev.Cursor().String() }, handler), nil
}

// runSubscription hands sub's messages to handler, each with the
// position pos gives it, on a goroutine of its own.
func (b *Broker) runSubscription(sub logSubscription, pos func(table.Event) string, handler func(Delivery) error) *Subscription {
	s := &Subscription{sub: sub, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ev := range sub.Events() {
			var d Delivery
			if err := d.Message.UnmarshalBinary(ev.Value); err != nil {
				_ = sub.Ack(ev)
				continue
			}
			if d.Expired(time.Now()) {
				_ = sub.Ack(ev)
				continue
			}
			d.Position = pos(ev)
			if err := handler(d); err != nil {
				s.err = err
				go func() { _ = sub.Close() }()
				for range sub.Events() {
				}
				return
			}
			_ = sub.Ack(ev)
		}
		if s.err == nil {
			s.err = sub.Err()
		}
	}()
	return s
}

// Close stops the subscription and waits for its handler
// (mqtt.Subscription.Close).
func (s *Subscription) Close() error {
	err := s.sub.Close()
	<-s.done
	return err
}

// Done is closed when the subscription has ended.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns why the subscription ended once Done is closed
// (mqtt.Subscription.Err).
func (s *Subscription) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
