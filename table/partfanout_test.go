package table_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// receiveAll receives from pm until it holds want distinct ids, acking
// each event, and fails on a duplicate, an event out of its partition's
// log order, or one from a partition its id does not route to.
func receiveAll(t *testing.T, p *table.Partitions, pm *table.PartitionMember, want int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	last := make(table.Cursors, p.Count())
	deadline := time.After(10 * time.Second)
	for len(got) < want {
		ev, ok, err := pm.Next(t.Context())
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if !ok {
			select {
			case <-pm.Ready():
			case <-time.After(20 * time.Millisecond): // a catch-up has no signal to give
			case <-deadline:
				t.Fatalf("received %d of %d", len(got), want)
			}
			continue
		}
		i := pm.Partition(ev)
		switch {
		case i != p.Of(ev.ID):
			t.Fatalf("%s from partition %d, routed to %d", ev.ID, i, p.Of(ev.ID))
		case !last[i].Less(ev.Cursor()):
			t.Fatalf("partition %d: %s at %s after %s", i, ev.ID, ev.Cursor(), last[i])
		case got[ev.ID]:
			t.Fatalf("%s received twice", ev.ID)
		}
		last[i] = ev.Cursor()
		got[ev.ID] = true
		if err := pm.Ack(ev); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// A partitioned fanout routes every partition's events to its members: one
// joined at the start of the logs catches up and then follows the route,
// one joined at the head follows it from there; each gets every event
// once, and a member rejoined from its checkpoint gets only what came
// after.
func TestPartitionFanoutRoutesEveryPartition(t *testing.T) {
	ctx := context.Background()
	es, _ := openEngines(t, nil, 3)
	p := openParts(t, es)
	defer p.Close()
	put3 := func(from, to int) {
		for i := from; i < to; i++ {
			id := fmt.Sprintf("k%04d", i)
			put(t, p.For(id), "t", id, "v")
		}
	}
	put3(0, 150)
	head, err := p.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var members []*table.PartitionMember
	pf, err := p.NewFanout(ctx, table.PartitionFanoutOptions{Table: "t", Start: head,
		Route: func(_ int, ev table.Event, deliver func(*table.PartitionMember)) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range members {
				deliver(m)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	join := func(start table.Cursors) *table.PartitionMember {
		m, err := pf.Join(start, nil)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		members = append(members, m)
		mu.Unlock()
		return m
	}
	old, live := join(make(table.Cursors, 3)), join(head)
	done := make(chan struct{})
	go func() { defer close(done); put3(150, 300) }()
	if got := receiveAll(t, p, old, 300); len(got) != 300 {
		t.Fatalf("from the start: %d", len(got))
	}
	<-done
	if got := receiveAll(t, p, live, 150); got["k0149"] || !got["k0150"] {
		t.Fatalf("from the head: %d events, k0149 %v, k0150 %v", len(got), got["k0149"], got["k0150"])
	}
	for _, m := range []*table.PartitionMember{old, live} {
		// A member joins the route when a Next finds nothing left to read.
		if ev, ok, err := m.Next(ctx); ok || err != nil {
			t.Fatalf("an event after all were received: %s, %v", ev.ID, err)
		}
	}
	if !old.Live() || !live.Live() {
		t.Fatal("members not on the route after catching up")
	}
	cp := old.Checkpoint()
	old.Close()
	if _, err := pf.Join(make(table.Cursors, 2), nil); !errors.Is(err, table.ErrBadCursor) {
		t.Fatalf("two cursors for three partitions: %v", err)
	}
	again := join(cp)
	put3(300, 330)
	if got := receiveAll(t, p, again, 30); got["k0299"] {
		t.Fatal("rejoined from its checkpoint, the member got an acknowledged event again")
	}
	if err := again.Ack(table.Event{}); err == nil {
		t.Fatal("ack of an event the member did not receive succeeded")
	}
}

// Retention past a member's position in one partition is that
// partition's error, found with errors.As; the member resumes there from
// the oldest retained entry.
func TestPartitionFanoutHistoryUnavailable(t *testing.T) {
	ctx := context.Background()
	es, _ := openEngines(t, nil, 2)
	p := openParts(t, es)
	defer p.Close()
	var ids [2][]string
	for i := 0; len(ids[0]) < 5 || len(ids[1]) < 5; i++ {
		id := fmt.Sprintf("k%d", i)
		put(t, p.For(id), "t", id, "v")
		ids[p.Of(id)] = append(ids[p.Of(id)], id)
	}
	head, _ := p.Head(ctx)
	if err := p.DB(1).TruncateBelow(ctx, head[1]); err != nil {
		t.Fatal(err)
	}
	pf, err := p.NewFanout(ctx, table.PartitionFanoutOptions{Table: "t", Start: head, Route: func(int, table.Event, func(*table.PartitionMember)) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	m, _ := pf.Join(make(table.Cursors, 2), nil)
	var pe *table.PartitionError
	for range 100 {
		_, _, err = m.Next(ctx)
		if err != nil {
			break
		}
	}
	if !errors.As(err, &pe) || pe.Partition != 1 || !errors.Is(err, table.ErrHistoryUnavailable) {
		t.Fatalf("next over a truncated partition 1: %v", err)
	}
	m.RestartPartition(1, head[1])
	for range 100 {
		if _, _, err := m.Next(ctx); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
	}
}
