package broker

import (
	"context"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// The broker's store may be split over partitions (table.Partitions),
// each its own engine (a JetStream stream led by its own server), so that
// no single log orders every commit. What must commit together decides
// where each record lives:
//
//   - a client's session record, its index entries, its QoS 2 rows and
//     the messages it publishes live in its client id's partition
//     (partitionOf): releasing a staged QoS 2 message and logging it is
//     one commit, as is writing a retained message with its log entry;
//   - the message log is every partition's: the router follows them all,
//     and a session's checkpoint holds a cursor per partition;
//   - retained messages are in their publisher's partition, so a topic
//     may have a copy in several; a read takes the newest by version;
//   - what concerns the whole broker (the shared groups' queues, node
//     records, saved retention rules) lives in the first partition.
//
// With one partition all of them are the one store, as before the split.

// partitionOf returns the partition holding client's state.
func (b *Broker) partitionOf(client string) int { return b.parts.Of(client) }

// dbFor returns the partition holding client's state.
func (b *Broker) dbFor(client string) *table.DB { return b.parts.For(client) }

// storeFor returns the session store of client's partition.
func (b *Broker) storeFor(client string) *session.Store { return b.stores[b.partitionOf(client)] }

// split reports whether the store has more than one partition.
func (b *Broker) split() bool { return b.parts.Count() > 1 }

// head returns the head of every partition's log.
func (b *Broker) head(ctx context.Context) (logpos.Vec, error) {
	cs, err := b.parts.Head(ctx)
	if err != nil {
		return logpos.Vec{}, err
	}
	return logpos.FromCursors(cs)
}

// rangeAll calls fn with each record of tbl under prefix in every
// partition, a partition's in id order, until fn returns false.
func (b *Broker) rangeAll(ctx context.Context, tbl, prefix string, fn func(part int, r table.Record) bool) error {
	for i := range b.parts.Count() {
		stop := false
		err := b.parts.DB(i).Range(ctx, tbl, prefix, func(r table.Record) bool {
			if !fn(i, r) {
				stop = true
				return false
			}
			return true
		})
		if err != nil || stop {
			return err
		}
	}
	return nil
}

// checkPartitioned refuses, on a split store, the options whose state
// is read as one log's: they need a store of one partition for now.
func checkPartitioned(parts *table.Partitions, o *Options) error {
	n := parts.Count()
	if n > logpos.Max {
		return fmt.Errorf("mqtt: New: %d partitions, at most %d: %w", n, logpos.Max, engine.ErrInvalidOption)
	}
	if n == 1 {
		return nil
	}
	for _, opt := range []struct {
		name string
		set  bool
	}{
		{"History", o.History > 0},
		{"Retention", len(o.Retention) > 0},
		{"TablesPrefix", o.TablesPrefix != ""},
	} {
		if opt.set {
			return fmt.Errorf("mqtt: New: %s needs a store of one partition; this one has %d: leave it unset, or run with one partition: %w",
				opt.name, n, engine.ErrInvalidOption)
		}
	}
	return nil
}
