package route

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

const msgs = "msgs"

// openParts opens n fresh Pebble stores as the partitions of one log.
func openParts(t *testing.T, n int) *table.Partitions {
	t.Helper()
	var es []engine.Engine
	for range n {
		e, err := engine.Open(context.Background(), "pebble", engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	p, err := table.OpenPartitions(context.Background(), es, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close()
		for _, e := range es {
			_ = e.Close()
		}
	})
	return p
}

// startRouter starts a router on a fresh log of n partitions at its
// head, with o's callbacks, and returns it with that head.
func startRouter(t *testing.T, n int, o Options) (*Router, *table.Partitions, logpos.Vec) {
	t.Helper()
	p := openParts(t, n)
	cs, err := p.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	head, err := logpos.FromCursors(cs)
	if err != nil {
		t.Fatal(err)
	}
	o.Table, o.Start = msgs, head
	r, err := Start(context.Background(), p, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, p, head
}

func publish(t *testing.T, db *table.DB, topics ...string) {
	t.Helper()
	tx := db.Begin()
	for _, name := range topics {
		if err := tx.Message(msgs, name, []byte("payload")); err != nil {
			t.Fatal(err)
		}
	}
	h, err := tx.Submit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
}

// matching returns a member's filter taking the events filter matches.
func matching(filter string) func(table.Event) bool {
	return func(ev table.Event) bool { return topic.Match(filter, ev.ID) }
}

// session is a member on the route and the topics it received.
type session struct {
	m    *table.PartitionMember
	wake chan struct{}
}

func join(t *testing.T, r *Router, client string, from logpos.Vec, wants func(table.Event) bool) *session {
	t.Helper()
	s := &session{wake: make(chan struct{}, 1)}
	var err error
	s.m, err = r.Member(from, wants, func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Join(client, s.m)
	return s
}

// receive returns the topics of the next n events, failing after a
// second without them, and then checks that nothing more comes soon.
func (s *session) receive(t *testing.T, n int) []string {
	t.Helper()
	ctx := context.Background()
	var got []string
	deadline := time.After(time.Second)
	for len(got) < n {
		ev, ok, err := s.m.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, ev.ID)
			if err := s.m.Ack(ev); err != nil {
				t.Fatal(err)
			}
			continue
		}
		select {
		case <-s.wake:
		case <-deadline:
			t.Fatalf("received %v, want %d events", got, n)
		}
	}
	select {
	case <-s.wake:
	case <-time.After(50 * time.Millisecond):
	}
	if ev, ok, _ := s.m.Next(ctx); ok {
		t.Fatalf("received %v and then %q, want only %d events", got, ev.ID, n)
	}
	return got
}

// TestRouterRoutesByIndex checks that each message reaches exactly the
// joined sessions whose subscriptions match it, in log order; that a
// session that left gets nothing more; that shared subscriptions reach
// the Shared callback, one per group, only once StartShared was called;
// and that Observe sees every message.
func TestRouterRoutesByIndex(t *testing.T) {
	var mu sync.Mutex
	var observed, shared []string
	r, p, head := startRouter(t, 1, Options{
		Observe: func(_ int, ev table.Event) { mu.Lock(); observed = append(observed, ev.ID); mu.Unlock() },
		Shared: func(_ int, ev table.Event, subs []topic.Subscription) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range subs {
				shared = append(shared, s.Group+":"+ev.ID)
			}
		},
	})

	ix := r.Index()
	ix.Add(topic.Subscription{Client: "a", Filter: "dev/a/#", QoS: 1})
	ix.Add(topic.Subscription{Client: "b", Filter: "dev/+/cmd", QoS: 1})
	ix.Add(topic.Subscription{Client: "offline", Filter: "#", QoS: 1})
	ix.Add(topic.Subscription{Client: "g1", Group: "grp", Filter: "dev/#", QoS: 1})
	ix.Add(topic.Subscription{Client: "g2", Group: "grp", Filter: "dev/#", QoS: 1})
	// A member catching up reads the log itself and takes what its
	// session's subscriptions match, as the broker's sessions do.
	a := join(t, r, "a", head, matching("dev/a/#"))
	b := join(t, r, "b", head, matching("dev/+/cmd"))
	db := p.DB(0)

	publish(t, db, "dev/a/cmd", "dev/b/cmd", "dev/a/x", "other")
	if got, want := a.receive(t, 2), []string{"dev/a/cmd", "dev/a/x"}; !slices.Equal(got, want) {
		t.Fatalf("a received %v, want %v", got, want)
	}
	if got, want := b.receive(t, 2), []string{"dev/a/cmd", "dev/b/cmd"}; !slices.Equal(got, want) {
		t.Fatalf("b received %v, want %v", got, want)
	}
	if !r.Online("a") || !r.Online("b") || r.Online("offline") {
		t.Fatalf("online: a %v, b %v, offline %v", r.Online("a"), r.Online("b"), r.Online("offline"))
	}

	r.Leave("b", b.m)
	b.m.Close()
	if r.Online("b") {
		t.Fatal("b online after Leave")
	}
	r.StartShared()
	publish(t, db, "dev/b/cmd", "dev/a/y")
	if got, want := a.receive(t, 1), []string{"dev/a/y"}; !slices.Equal(got, want) {
		t.Fatalf("a received %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"grp:dev/b/cmd", "grp:dev/a/y"}; !slices.Equal(shared, want) {
		t.Fatalf("shared deliveries %v, want %v (none before StartShared, one per group after)", shared, want)
	}
	if want := []string{"dev/a/cmd", "dev/b/cmd", "dev/a/x", "other", "dev/b/cmd", "dev/a/y"}; !slices.Equal(observed, want) {
		t.Fatalf("observed %v, want %v", observed, want)
	}
}

// TestJoinReplacesEarlierMember checks that a client's new member takes
// the route from its earlier one, and that the earlier one's Leave does
// not take the new one off.
func TestJoinReplacesEarlierMember(t *testing.T) {
	r, p, head := startRouter(t, 1, Options{})
	db := p.DB(0)
	r.Index().Add(topic.Subscription{Client: "c", Filter: "t", QoS: 1})
	old := join(t, r, "c", head, matching("t"))
	cur := join(t, r, "c", head, matching("t"))
	r.Leave("c", old.m)
	old.m.Close()
	if !r.Online("c") {
		t.Fatal("the earlier member's Leave took the new one off the route")
	}
	publish(t, db, "t")
	if got := cur.receive(t, 1); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("new member received %v", got)
	}
}

// TestRouterPartitions checks routing over a log of three partitions:
// a member receives every matching message of every partition, each
// partition's in its log order, and Observe and Shared are told the
// partition each message is in.
func TestRouterPartitions(t *testing.T) {
	var mu sync.Mutex
	observed := map[string]int{}
	shared := map[string]int{}
	r, p, head := startRouter(t, 3, Options{
		Observe: func(part int, ev table.Event) { mu.Lock(); observed[ev.ID] = part; mu.Unlock() },
		Shared: func(part int, ev table.Event, subs []topic.Subscription) {
			mu.Lock()
			defer mu.Unlock()
			shared[ev.ID] = part
		},
	})
	r.Index().Add(topic.Subscription{Client: "a", Filter: "dev/#", QoS: 1})
	r.Index().Add(topic.Subscription{Client: "late", Filter: "dev/#", QoS: 1})
	r.Index().Add(topic.Subscription{Client: "g", Group: "grp", Filter: "dev/#", QoS: 1})
	r.StartShared()
	// "late" catches up from the start of every partition's log.
	late := join(t, r, "late", logpos.Start(3), matching("dev/#"))
	a := join(t, r, "a", head, matching("dev/#"))
	var want [3][]string
	for i := range 30 {
		name := fmt.Sprintf("dev/%d", i)
		part := i % 3
		publish(t, p.DB(part), name)
		want[part] = append(want[part], name)
	}
	for name, s := range map[string]*session{"a": a, "late": late} {
		var got [3][]string
		ctx := context.Background()
		deadline := time.After(5 * time.Second)
		for n := 0; n < 30; {
			ev, ok, err := s.m.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				select {
				case <-s.wake:
				case <-deadline:
					t.Fatalf("%s received %d of 30", name, n)
				}
				continue
			}
			part := s.m.Partition(ev)
			got[part] = append(got[part], ev.ID)
			if err := s.m.Ack(ev); err != nil {
				t.Fatal(err)
			}
			n++
		}
		for part := range 3 {
			if !slices.Equal(got[part], want[part]) {
				t.Fatalf("%s received from partition %d %v, want %v", name, part, got[part], want[part])
			}
		}
		if cp := s.m.Checkpoint(); len(cp) != 3 {
			t.Fatalf("%s checkpoint %v", name, cp)
		}
	}
	// Shared runs after the members got a message: wait for the last.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(shared)
		mu.Unlock()
		if n == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Shared told of %d of 30 messages", n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 30 {
		name := fmt.Sprintf("dev/%d", i)
		if observed[name] != i%3 || shared[name] != i%3 {
			t.Fatalf("%s observed in partition %d, shared from %d, written to %d", name, observed[name], shared[name], i%3)
		}
	}
	if f := r.Frontier(); f.Len() != 3 {
		t.Fatalf("frontier %v", f)
	}
}
