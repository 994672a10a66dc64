package table

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
)

// PartitionError is an error of one partition, from a PartitionMember's
// Next: errors.As finds the partition, errors.Is the cause (such as
// ErrHistoryUnavailable, after which RestartPartition resumes it).
type PartitionError struct {
	Partition int
	Err       error
}

func (e *PartitionError) Error() string { return fmt.Sprintf("partition %d: %v", e.Partition, e.Err) }

// Unwrap returns the partition's error.
func (e *PartitionError) Unwrap() error { return e.Err }

// PartitionFanout is a Fanout on every partition of a Partitions, with
// one route: each partition's follower reads that partition's log once
// and hands each event to the members the route names; a member
// (PartitionMember) receives the events of every partition, each
// partition's in log order, with the guarantees of a Fanout's member per
// partition, and its checkpoint is a Cursors.
type PartitionFanout struct {
	fs []*Fanout
	// deliver holds, per partition, the deliver function its follower
	// passes to the route (a Fanout makes it once); adapt the function
	// the route is given instead, which delivers to the member of that
	// partition. Each is used only on its partition's routing path.
	deliver []func(*Member)
	adapt   []func(*PartitionMember)
}

// PartitionFanoutOptions configures a PartitionFanout; the fields are
// those of FanoutOptions, Start with one cursor per partition.
type PartitionFanoutOptions struct {
	// Table is the table whose log events are routed.
	Table string
	// Start is where each partition's follower starts (usually Head).
	Start Cursors
	// Route is called for each event of Table with the partition it is
	// in, in each partition's log order, on that partition's routing path
	// (partitions route concurrently); it calls deliver for each member
	// the event goes to. It must not block (see FanoutOptions.Route).
	Route func(part int, ev Event, deliver func(*PartitionMember))
	// MaxQueue is FanoutOptions.MaxQueue, per partition.
	MaxQueue int
	// Logger receives the followers' warnings; slog.Default() when nil.
	Logger *slog.Logger
}

// NewFanout starts a follower of o.Table's log in every partition (see
// DB.NewFanout).
func (p *Partitions) NewFanout(ctx context.Context, o PartitionFanoutOptions) (*PartitionFanout, error) {
	if err := p.checkCursors(o.Start); err != nil {
		return nil, err
	}
	if o.Route == nil {
		return nil, fmt.Errorf("table: NewFanout: nil Route")
	}
	n := len(p.dbs)
	pf := &PartitionFanout{deliver: make([]func(*Member), n), adapt: make([]func(*PartitionMember), n)}
	for i, db := range p.dbs {
		pf.adapt[i] = func(pm *PartitionMember) { pf.deliver[i](pm.ms[i]) }
		f, err := db.NewFanout(ctx, FanoutOptions{Table: o.Table, Start: o.Start[i], MaxQueue: o.MaxQueue,
			Logger: o.Logger, Route: func(ev Event, deliver func(*Member)) {
				pf.deliver[i] = deliver
				o.Route(i, ev, pf.adapt[i])
			}})
		if err != nil {
			_ = pf.Close()
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
		pf.fs = append(pf.fs, f)
	}
	return pf, nil
}

// Frontier returns each partition follower's frontier (Fanout.Frontier).
func (pf *PartitionFanout) Frontier() Cursors {
	cs := make(Cursors, len(pf.fs))
	for i, f := range pf.fs {
		cs[i] = f.Frontier()
	}
	return cs
}

// Close stops every partition's follower and waits for them. Members stay
// readable; none is routed anything after.
func (pf *PartitionFanout) Close() error {
	for _, f := range pf.fs {
		_ = f.Close()
	}
	return nil
}

// PartitionMember is one consumer of a PartitionFanout: a Member in each
// partition, received through one Next. One goroutine receives; Ack,
// Checkpoint and Close may be called from any.
type PartitionMember struct {
	ms    []*Member
	ready chan struct{}
	next  int // the partition Next looks at first (receiver only)
}

// Join adds a member that receives, from start on (one cursor per
// partition, exclusive), the events of the fanout's table that filter
// accepts while it catches up, then those the route delivers to it (see
// Fanout.Join). Receive with Next until it has nothing, then wait on
// Ready.
func (pf *PartitionFanout) Join(start Cursors, filter func(Event) bool) (*PartitionMember, error) {
	pm := &PartitionMember{ready: make(chan struct{}, 1)}
	return pm, pf.join(pm, start, filter, pm.signal)
}

// JoinFunc is Join for a receiver that runs only while it has work: notify
// is called where Ready would be signalled, under the rules of
// Fanout.JoinFunc.
func (pf *PartitionFanout) JoinFunc(start Cursors, filter func(Event) bool, notify func()) (*PartitionMember, error) {
	pm := &PartitionMember{}
	return pm, pf.join(pm, start, filter, notify)
}

func (pf *PartitionFanout) join(pm *PartitionMember, start Cursors, filter func(Event) bool, notify func()) error {
	if len(start) != len(pf.fs) {
		return fmt.Errorf("%w: %d cursors for %d partitions", ErrBadCursor, len(start), len(pf.fs))
	}
	pm.ms = make([]*Member, len(pf.fs))
	for i, f := range pf.fs {
		pm.ms[i] = f.JoinFunc(start[i], filter, notify)
	}
	return nil
}

func (pm *PartitionMember) signal() {
	select {
	case pm.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled when Next may have something new (never for a member
// made with JoinFunc).
func (pm *PartitionMember) Ready() <-chan struct{} { return pm.ready }

// Next returns the member's next event from any partition without
// waiting for one: ok is false when no partition has one now. Partitions
// take turns, so a busy one does not hold back the others. A partition's
// error comes as a *PartitionError and leaves that partition where it was
// (see Member.Next); the others go on at the next call.
func (pm *PartitionMember) Next(ctx context.Context) (Event, bool, error) {
	n := len(pm.ms)
	for k := range n {
		i := (pm.next + k) % n
		ev, ok, err := pm.ms[i].Next(ctx)
		if err != nil {
			pm.next = (i + 1) % n
			return Event{}, false, &PartitionError{Partition: i, Err: err}
		}
		if ok {
			pm.next = (i + 1) % n
			return ev, true, nil
		}
	}
	return Event{}, false, nil
}

// Partition returns the partition ev came from, or -1 when this member
// did not receive it.
func (pm *PartitionMember) Partition(ev Event) int { return slices.Index(pm.ms, ev.mem) }

// Ack acknowledges a received event (see Member.Ack).
func (pm *PartitionMember) Ack(ev Event) error {
	i := pm.Partition(ev)
	if i < 0 {
		return fmt.Errorf("table: ack of an event this member did not receive (%s/%q at %d.%d)", ev.Table, ev.ID, ev.Key, ev.Index)
	}
	return pm.ms[i].Ack(ev)
}

// Checkpoint returns the acknowledged frontier of every partition (see
// Member.Checkpoint).
func (pm *PartitionMember) Checkpoint() Cursors { return checkpointsOf(pm.ms) }

// RestartPartition has partition i's member catch up from from (see
// Member.Restart), after a *PartitionError for i.
func (pm *PartitionMember) RestartPartition(i int, from Cursor) { pm.ms[i].Restart(from) }

// Live reports whether the member is on the route in every partition.
func (pm *PartitionMember) Live() bool {
	for _, m := range pm.ms {
		if !m.Live() {
			return false
		}
	}
	return true
}

// Behind reports whether the member is behind in any partition (see
// Member.Behind).
func (pm *PartitionMember) Behind(n int) bool {
	for _, m := range pm.ms {
		if m.Behind(n) {
			return true
		}
	}
	return false
}

// Detaches reports how often the member left a partition's route for
// being too slow, all partitions together.
func (pm *PartitionMember) Detaches() int {
	n := 0
	for _, m := range pm.ms {
		n += m.Detaches()
	}
	return n
}

// Close ends the member in every partition (see Member.Close).
func (pm *PartitionMember) Close() {
	for _, m := range pm.ms {
		m.Close()
	}
}
