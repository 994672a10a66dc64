// Package mqtt is Tidemark's MQTT 3.1.1 and 5.0 broker. All durable state
// goes through package table, so the broker behaves the same on every
// engine:
//
//   - Every QoS 1 and 2 message is written once, to the message-log table
//     (MessageTable); sessions keep a checkpoint over that log, not copies, and
//     an offline session catches up by replaying from its checkpoint.
//   - Inbound QoS 1 and 2 are pipelined: the read loop submits commits
//     without waiting and one FIFO per connection sends PUBACK, PUBREC and
//     PUBCOMP in packet order as the commits become durable. The writes
//     without preconditions of packets that arrive together (QoS 1
//     messages, a subscriber's PUBREC and PUBCOMP state) share one commit,
//     and so do the records of the QoS 2 deliveries a sender takes
//     together; QoS 2 PUBLISHes to a subscriber wait for their record in
//     the same FIFO, so the sender never waits for the store.
//   - A subscription matches only messages committed after it was made.
//   - QoS 2 PUBLISH stages the message durably (first write wins) before the
//     PUBREC; PUBREL releases it in one atomic commit that appends it to the
//     message log and deletes the staged copy on the condition that it is
//     still staged, so a retried PUBREL, here or on another node sharing the
//     store, can never deliver it twice. Subscribers see it only after that
//     commit, never before.
//   - Outbound QoS 2 state is durable: after a PUBREC the broker re-sends
//     PUBREL, never the PUBLISH, across reconnects and restarts.
//   - QoS 0 subscriptions, also of persistent sessions, do not queue: a
//     session receives at QoS 0 only what is published while it is
//     connected, and a QoS 0 delivery is never repeated after a
//     reconnect or a crash (at most once). QoS 1 and 2 subscriptions of a
//     persistent session receive what was published while offline.
//   - The store may be split over partitions (NewPartitioned), one engine
//     each, so that commits spread over several logs: a client's session
//     state and the messages it publishes live in its client id's
//     partition, a session's checkpoint is a cursor per partition, and
//     one publisher's messages stay in one log, in order.
//
// The package is the broker's public face; its machinery is in the
// packages under mqtt/internal (the connections and the broker's core in
// broker, a session's sending side in delivery, its stored state in
// session, routing in route).
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/broker"
	"github.com/tidemark-io/tidemark/table"
)

// Broker is an MQTT broker over a table.DB. It is safe for concurrent use.
type Broker struct{ b *broker.Broker }

// New returns a broker storing its state in db. Call Serve to accept
// connections and Close to stop.
func New(db *table.DB, opts Options) (*Broker, error) {
	if db == nil {
		return nil, errors.New("mqtt: New: nil table.DB")
	}
	if i, n := db.Partition(); n > 1 {
		// A broker on one partition of a split store would put the
		// state of every client there, where the brokers on the whole
		// store do not look for it.
		return nil, fmt.Errorf("mqtt: New: the table.DB is partition %d of %d: open the broker on all of them with NewPartitioned: %w",
			i, n, engine.ErrInvalidOption)
	}
	return NewPartitioned(table.OnePartition(db), opts)
}

// NewPartitioned returns a broker storing its state in the partitions of
// parts (at most 16), so that commits spread over their engines: a
// client's session state and the messages it publishes go to its client
// id's partition (table.PartitionOf), and every node routes the messages
// of every partition. A session's checkpoint is then a cursor per
// partition, and MaxQueuedMessages and MaxQueuedBytes hold in each
// partition of the log. The options that read one log as a whole
// (History, Retention, TablesPrefix) and replay subscriptions need a
// store of one partition and are refused on one of several. Close does
// not close parts.
func NewPartitioned(parts *table.Partitions, opts Options) (*Broker, error) {
	b, err := broker.New(parts, broker.Options(opts))
	if err != nil {
		return nil, err
	}
	return &Broker{b}, nil
}

// Serve accepts connections on ln until the broker closes or ln is
// closed; a failed Accept is retried (see Options.MaxConnections for what
// keeps the process within its descriptors). The broker closes ln when it
// closes, also when Serve is called after Close, which returns
// net.ErrClosed at once.
func (b *Broker) Serve(ln net.Listener) error { return b.b.Serve(ln) }

// Close stops accepting, closes every connection (acknowledged messages
// are already durable; unacknowledged ones will be re-sent by clients),
// persists every session's checkpoint and waits for the broker's goroutines.
// It does not close the table.DB.
func (b *Broker) Close() error { return b.b.Close() }

// Publish publishes m as a client would, without access checks. A QoS 1
// or 2 message is in the message log, durably, when Publish returns nil:
// every subscriber it matches receives it, now or when it next connects.
// A QoS 0 message goes to the online MQTT subscribers only. m.Retain
// updates the retained message of the topic (an empty payload clears it).
// On a topic under Options.TablesPrefix, Publish writes the table, at any
// QoS, and returns once the write is durable (docs/tables.md).
func (b *Broker) Publish(ctx context.Context, m Message) error { return b.b.Publish(ctx, m) }

// Subscribe calls handler, on a goroutine of its own, for each QoS 1 and
// QoS 2 message whose topic matches filter, in log order, until ctx ends,
// Close, or handler returns an error (reported by Err). Messages come
// from the message log, so a replay (o.From) continues live with no gap
// and no duplicate; QoS 0 messages, which are not in the log, do not
// reach in-process subscribers. There are no access checks. A filter
// under Options.TablesPrefix is refused: the application reads those
// tables through table.DB.Subscribe.
func (b *Broker) Subscribe(ctx context.Context, filter string, o SubscribeOptions, handler func(Delivery) error) (*Subscription, error) {
	if handler == nil {
		return nil, errors.New("mqtt: Subscribe: nil handler")
	}
	s, err := b.b.Subscribe(ctx, filter, broker.SubscribeOptions(o), func(d broker.Delivery) error { return handler(Delivery(d)) })
	if err != nil {
		return nil, err
	}
	return &Subscription{s}, nil
}

// Options returns the broker's options with the defaults applied: a limit
// lifted with a negative value (SessionExpiry, MaxQueuedMessages) reads 0
// there, so pass a negative value again to lift it in another broker.
func (b *Broker) Options() Options { return Options(b.b.Options()) }

// Stats returns the broker's current counters.
func (b *Broker) Stats() Stats { return Stats(b.b.Stats()) }

// SessionCounts returns the number of stored sessions with and without a
// connection.
func (b *Broker) SessionCounts(ctx context.Context) (online, offline int, err error) {
	return b.b.SessionCounts(ctx)
}

// Retain runs one retention pass now, as the broker does every
// Options.RetentionEvery: the log below the lowest checkpoint any
// session or retention rule needs is truncated, and with the queue
// limits, offline sessions over them lose their oldest messages. A pass
// costs what the sessions below the lowest offline checkpoint cost, not a
// read of every stored session.
func (b *Broker) Retain(ctx context.Context) error { return b.b.Retain(ctx) }
