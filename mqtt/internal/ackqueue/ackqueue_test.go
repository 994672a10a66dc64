package ackqueue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/ackqueue"
)

// entry stands for a connection's acknowledgement: pi names its pusher
// and its place in that pusher's order.
type entry struct{ pi uint16 }

// TestAckQueueWakesEveryPusher: several pushers (a connection's read loop
// and its sender) wait on a full queue while the loop drains it faster
// than they refill it; each must get room, and every entry must be taken
// once, in each pusher's order, by one loop at a time.
func TestAckQueueWakesEveryPusher(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var q *ackqueue.Queue[entry]
	var taken atomic.Int64
	var inLoop atomic.Int32
	last := make([]int, 3)
	var mu sync.Mutex
	loop := func() {
		if inLoop.Add(1) != 1 {
			t.Error("two ack loops at once")
		}
		for {
			e, ok := q.TryPop()
			if !ok {
				// Past PopOrEnd's false the loop may take nothing more;
				// the next push may start another right away.
				inLoop.Add(-1)
				if e, ok = q.PopOrEnd(); !ok {
					return
				}
				inLoop.Add(1)
			}
			who, n := int(e.pi>>12), int(e.pi&0xfff)
			mu.Lock()
			if n != last[who]+1 {
				t.Errorf("pusher %d: entry %d after %d", who, n, last[who])
			}
			last[who] = n
			mu.Unlock()
			taken.Add(1)
			if n%7 == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
	q = ackqueue.New[entry](4, loop, nil)
	var wg sync.WaitGroup
	for who := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= 4000; n++ {
				if !q.Push(ctx, entry{pi: uint16(who<<12 | n)}) {
					t.Errorf("pusher %d stalled at %d", who, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	q.Stop()
	if got := taken.Load(); got != 12000 {
		t.Fatalf("%d entries taken, want 12000", got)
	}
	if n := q.Free(); n != 4 {
		t.Fatalf("%d free after draining, want 4", n)
	}
}

// TestAckQueueShrink: an emptied queue keeps its entries' array for the
// next push, until Shrink lets it go; Shrink leaves entries in place.
func TestAckQueueShrink(t *testing.T) {
	q := ackqueue.New[entry](8, func() {}, func(func()) {}) // no loop: the test pops
	ctx := t.Context()
	pushPop := func() {
		if !q.Push(ctx, entry{pi: 1}) {
			t.Fatal("push refused")
		}
		if e, ok := q.TryPop(); !ok || e.pi != 1 {
			t.Fatalf("popped %v, %v", e, ok)
		}
	}
	pushPop()
	if n := testing.AllocsPerRun(10, pushPop); n != 0 {
		t.Fatalf("a push into an emptied queue allocated %v times, want 0", n)
	}
	if n := testing.AllocsPerRun(10, func() { pushPop(); q.Shrink() }); n == 0 {
		t.Fatal("a push after Shrink allocated nothing: the array was kept")
	}
	q.Push(ctx, entry{pi: 2})
	q.Push(ctx, entry{pi: 3})
	q.Shrink()
	for _, want := range []uint16{2, 3} {
		if e, ok := q.TryPop(); !ok || e.pi != want {
			t.Fatalf("after Shrink of a queue holding entries, popped %v, %v; want %d", e, ok, want)
		}
	}
	if q.Free() != 8 {
		t.Fatalf("free %d, want 8", q.Free())
	}
	// Shrink of a queue holding entries lets go of the array once the
	// queue drains.
	if n := testing.AllocsPerRun(10, func() {
		q.Push(ctx, entry{pi: 4})
		q.Shrink()
		if e, ok := q.TryPop(); !ok || e.pi != 4 {
			t.Fatalf("popped %v, %v", e, ok)
		}
	}); n == 0 {
		t.Fatal("a queue shrunk while it held an entry kept its array once drained")
	}
}

// TestAckQueueKeepOnDrain: a queue drained after a burst lets go of an
// array larger than 32 entries unless KeepOnDrain allows it, and never
// keeps one larger than it allows.
func TestAckQueueKeepOnDrain(t *testing.T) {
	ctx := t.Context()
	burst := func(q *ackqueue.Queue[entry], n int) func() {
		return func() {
			for i := range n {
				if !q.Push(ctx, entry{pi: uint16(i)}) {
					t.Fatal("push refused")
				}
			}
			for i := range n {
				if e, ok := q.TryPop(); !ok || e.pi != uint16(i) {
					t.Fatalf("popped %v, %v; want %d", e, ok, i)
				}
			}
		}
	}
	for _, c := range []struct {
		keep, n int
		kept    bool
	}{
		{0, 100, false}, // the default: 32
		{0, 20, true},
		{256, 100, true},
		{256, 256, true},
		{256, 300, false},
	} {
		q := ackqueue.New[entry](1000, func() {}, func(func()) {})
		if c.keep > 0 {
			q.KeepOnDrain(c.keep)
		}
		b := burst(q, c.n)
		b()
		if n := testing.AllocsPerRun(5, b); (n == 0) != c.kept {
			t.Errorf("keep %d, bursts of %d: %v allocations per burst after the first, want the array kept: %v", c.keep, c.n, n, c.kept)
		}
		q.Shrink()
		if q.Holding() {
			t.Errorf("keep %d, bursts of %d: Shrink of a drained queue kept its array", c.keep, c.n)
		}
	}
}
