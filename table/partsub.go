package table

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/engine"
)

// PartitionSubscription reads every partition of a Partitions, replay then
// live, and hands their events over one channel: one Subscription per
// partition, merged. Within a partition events keep the log's order and
// the Subscription's guarantees (no gap, no duplicate, transaction by
// transaction); events of different partitions come in the order they are
// read.
//
// Checkpoint is the acknowledged frontier, one cursor per partition:
// resuming from it never loses an event that was not acknowledged with
// Ack, whatever happens to the subscription or the process. There is no
// handled frontier: an event read from a partition but not yet handed over
// when the subscription ends is simply not delivered, and stays above the
// checkpoint.
type PartitionSubscription struct {
	subs   []*Subscription
	events chan Event
	cancel context.CancelFunc
	done   chan struct{}
	// stopping is set once the subscription is ending: errors of the
	// partitions' subscriptions after it are the ending's, not causes.
	stopping atomic.Bool
	closing  atomic.Bool

	mu  sync.Mutex
	err error
}

// Subscribe subscribes to every partition (see SubscribeOptions), each
// from its cursor in start, which must hold one per partition; o.Start and
// o.Inclusive must be unset. The subscription runs until Close, the end of
// ctx, Close of the partitions, or an error in one partition, which ends
// it in every partition and is reported by Err. Each partition has its
// own reader: o.Filter and o.Hooks are called from all of them, at once.
func (p *Partitions) Subscribe(ctx context.Context, start Cursors, o SubscribeOptions) (*PartitionSubscription, error) {
	if err := p.checkCursors(start); err != nil {
		return nil, err
	}
	if o.Start != (Cursor{}) || o.Inclusive {
		return nil, fmt.Errorf("table: subscribe to partitions: set the start of each partition in start, not Start or Inclusive: %w", engine.ErrInvalidOption)
	}
	if err := o.normalize(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	ps := &PartitionSubscription{
		subs: make([]*Subscription, 0, len(p.dbs)), events: make(chan Event, o.Buffer),
		cancel: cancel, done: make(chan struct{}),
	}
	for i, db := range p.dbs {
		po := o
		po.Start = start[i]
		s, err := db.Subscribe(sctx, po)
		if err != nil {
			cancel()
			for _, s := range ps.subs {
				_ = s.Close()
			}
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
		ps.subs = append(ps.subs, s)
	}
	var wg sync.WaitGroup
	for i, s := range ps.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps.forward(sctx, i, s)
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(ps.events)
		close(ps.done)
	}()
	return ps, nil
}

// forward hands partition i's events over until its subscription ends,
// then ends the others.
func (ps *PartitionSubscription) forward(ctx context.Context, i int, s *Subscription) {
	for ev := range s.Events() {
		select {
		case ps.events <- ev:
		case <-ctx.Done(): // s ends too: ctx is its context
		}
	}
	if err := s.Err(); err != nil && !ps.stopping.Load() {
		ps.mu.Lock()
		if ps.err == nil {
			ps.err = fmt.Errorf("partition %d: %w", i, err)
		}
		ps.mu.Unlock()
	}
	ps.stopping.Store(true)
	ps.cancel()
}

// Events returns the channel of merged events; it is closed when the
// subscription ends.
func (ps *PartitionSubscription) Events() <-chan Event { return ps.events }

// Partition returns the partition ev came from, or -1 when this
// subscription did not deliver it.
func (ps *PartitionSubscription) Partition(ev Event) int { return slices.Index(ps.subs, ev.sub) }

// Ack acknowledges a received event (see Subscription.Ack); an event this
// subscription did not deliver is an error.
func (ps *PartitionSubscription) Ack(ev Event) error {
	i := ps.Partition(ev)
	if i < 0 {
		return fmt.Errorf("table: ack of an event this subscription did not deliver (%s/%q at %d.%d)", ev.Table, ev.ID, ev.Key, ev.Index)
	}
	return ps.subs[i].Ack(ev)
}

// Checkpoint returns the acknowledged frontier of every partition, the
// position a durable consumer persists and later resumes from.
func (ps *PartitionSubscription) Checkpoint() Cursors { return checkpointsOf(ps.subs) }

// checkpointsOf returns the checkpoint of each partition's consumer, in
// partition order.
func checkpointsOf[C interface{ Checkpoint() Cursor }](consumers []C) Cursors {
	cs := make(Cursors, len(consumers))
	for i, c := range consumers {
		cs[i] = c.Checkpoint()
	}
	return cs
}

// Unacked returns the number of delivered events not yet acknowledged, in
// every partition (see Subscription.Unacked).
func (ps *PartitionSubscription) Unacked() int {
	n := 0
	for _, s := range ps.subs {
		n += s.Unacked()
	}
	return n
}

// Close stops the subscription in every partition and waits for it to
// end. Checkpoint stays readable and Ack keeps working for events
// received before.
func (ps *PartitionSubscription) Close() error {
	ps.closing.Store(true)
	ps.stopping.Store(true)
	ps.cancel()
	<-ps.done
	return nil
}

// Done is closed when the subscription has ended.
func (ps *PartitionSubscription) Done() <-chan struct{} { return ps.done }

// Err returns why the subscription ended: nil while it runs or after
// Close, or the first partition's cause (the context's error, ErrClosed,
// a read error such as ErrHistoryUnavailable), naming the partition.
func (ps *PartitionSubscription) Err() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.err
}
