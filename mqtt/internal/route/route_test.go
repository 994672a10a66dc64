package route

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

const msgs = "msgs"

func openDB(t *testing.T) *table.DB {
	t.Helper()
	e, err := engine.Open(context.Background(), "pebble", engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	db, err := table.Open(context.Background(), e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(); _ = e.Close() })
	return db
}

// startRouter starts a router on a fresh database at its log head, with
// o's callbacks, and returns it with that head.
func startRouter(t *testing.T, o Options) (*Router, *table.DB, table.Cursor) {
	t.Helper()
	db := openDB(t)
	head, err := db.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o.Table, o.Start = msgs, head
	r, err := Start(context.Background(), db, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, db, head
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
	m    *table.Member
	wake chan struct{}
}

func join(r *Router, client string, from table.Cursor, wants func(table.Event) bool) *session {
	s := &session{wake: make(chan struct{}, 1)}
	s.m = r.Member(from, wants, func() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	})
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
	r, db, head := startRouter(t, Options{
		Observe: func(ev table.Event) { mu.Lock(); observed = append(observed, ev.ID); mu.Unlock() },
		Shared: func(ev table.Event, subs []topic.Subscription) {
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
	a := join(r, "a", head, matching("dev/a/#"))
	b := join(r, "b", head, matching("dev/+/cmd"))

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
	r, db, head := startRouter(t, Options{})
	r.Index().Add(topic.Subscription{Client: "c", Filter: "t", QoS: 1})
	old := join(r, "c", head, matching("t"))
	cur := join(r, "c", head, matching("t"))
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
