package table_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// fanoutMember is a test consumer: the ids it wants and what it received.
type fanoutMember struct {
	m     *table.Member
	mod   int
	start table.Cursor
	slow  bool
	got   []table.Event
	// woken, when set, is what notify signals: the member joined with
	// JoinFunc and its Ready is never signalled.
	woken chan struct{}
}

func (fm *fanoutMember) ready() <-chan struct{} {
	if fm.woken != nil {
		return fm.woken
	}
	return fm.m.Ready()
}

func (fm *fanoutMember) wants(id string) bool {
	var n int
	_, _ = fmt.Sscanf(id, "r%d", &n)
	return n%5 == fm.mod
}

// TestFanoutDeliversEachEventOnce routes a log of multi-record commits to
// members that join at the start, in the middle and at the head, some of
// them slow enough to leave the route and catch up again, and checks that
// each received exactly the entries after its start that it wants, in log
// order (half of them woken by JoinFunc's notify instead of Ready), and that its checkpoint covers the whole log once all are acked.
func TestFanoutDeliversEachEventOnce(t *testing.T) {
	fanoutDeliversEachEventOnce(t, false)
}

// TestFanoutPumpedDeliversEachEventOnce is TestFanoutDeliversEachEventOnce
// with the committer calling DB.Pump after each commit and another
// goroutine calling it all along, so events are routed by the committing
// goroutines, the pumping one and the follower's own, in turn.
func TestFanoutPumpedDeliversEachEventOnce(t *testing.T) {
	fanoutDeliversEachEventOnce(t, true)
}

func fanoutDeliversEachEventOnce(t *testing.T, pump bool) {
	db, _ := openDB(t)
	ctx := t.Context()
	const tbl = "fan"
	put(t, db, tbl, "r0", "first")
	head := headOf(t, db)
	var members []*fanoutMember
	var mu sync.Mutex // guards members for Route
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: tbl, Start: head, MaxQueue: 8,
		Route: func(ev table.Event, deliver func(*table.Member)) {
			mu.Lock()
			defer mu.Unlock()
			for _, fm := range members {
				if fm.wants(ev.ID) {
					deliver(fm.m)
					deliver(fm.m) // a second match of the same member is ignored
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	join := func(start table.Cursor, i int, slow bool) *fanoutMember {
		fm := &fanoutMember{mod: i % 5, start: start, slow: slow}
		filter := func(ev table.Event) bool { return fm.wants(ev.ID) }
		if i%2 == 1 {
			fm.woken = make(chan struct{}, 1)
			fm.m = f.JoinFunc(start, filter, func() {
				select {
				case fm.woken <- struct{}{}:
				default:
				}
			})
		} else {
			fm.m = f.Join(start, filter)
		}
		mu.Lock()
		members = append(members, fm)
		mu.Unlock()
		return fm
	}
	const commits = 600
	var wg sync.WaitGroup
	consume := func(fm *fanoutMember, stop <-chan struct{}) {
		defer wg.Done()
		for {
			ev, ok, err := fm.m.Next(ctx)
			if err != nil {
				t.Errorf("next: %v", err)
				return
			}
			if ok {
				fm.got = append(fm.got, ev)
				if err := fm.m.Ack(ev); err != nil {
					t.Errorf("ack: %v", err)
				}
				if fm.slow && rand.IntN(20) == 0 {
					time.Sleep(time.Millisecond)
				}
				continue
			}
			select {
			case <-fm.ready():
			case <-stop:
				return
			}
		}
	}
	stop := make(chan struct{})
	var all []*fanoutMember
	for i := range 10 {
		all = append(all, join(table.Cursor{}, i, i%3 == 0))
		all = append(all, join(head, i, i%4 == 0))
	}
	for _, fm := range all {
		wg.Add(1)
		go consume(fm, stop)
	}
	pumped := make(chan struct{})
	if pump {
		go func() {
			defer close(pumped)
			for {
				select {
				case <-stop:
					return
				default:
					db.Pump()
					time.Sleep(50 * time.Microsecond)
				}
			}
		}()
	} else {
		close(pumped)
	}
	for i := range commits {
		tx := db.Begin()
		for j := range 1 + i%3 {
			if err := tx.Put(tbl, fmt.Sprintf("r%d", (i+j*7)%23), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if pump {
			db.Pump()
		}
		if i == commits/2 {
			mid, err := db.Head(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for k := range 5 {
				fm := join(mid, k, k == 0)
				all = append(all, fm)
				wg.Add(1)
				go consume(fm, stop)
			}
		}
	}
	end, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every member reaches the end (its checkpoint covers the log).
	deadline := time.Now().Add(30 * time.Second)
	for _, fm := range all {
		for fm.m.Checkpoint().Less(end) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	<-pumped

	// The expected events per member: read the whole log once.
	var log []table.Event
	_, err = db.Follow(ctx, table.SubscribeOptions{Table: tbl, IncludeSuperseded: true, Composite: true}, func(ev table.Event) error {
		log = append(log, ev)
		if !ev.Cursor().Less(end) {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatalf("read log: %v", err)
	}
	detached := 0
	for i, fm := range all {
		var want []table.Cursor
		for _, ev := range log {
			if !fm.start.Covers(ev.Key, ev.Index) && fm.wants(ev.ID) {
				want = append(want, ev.Cursor())
			}
		}
		if len(fm.got) != len(want) {
			t.Errorf("member %d (start %v, slow %v): %d events, want %d", i, fm.start, fm.slow, len(fm.got), len(want))
			continue
		}
		for j, ev := range fm.got {
			if ev.Cursor() != want[j] {
				t.Errorf("member %d: event %d at %v, want %v", i, j, ev.Cursor(), want[j])
				break
			}
		}
		if cp := fm.m.Checkpoint(); cp.Less(end) {
			t.Errorf("member %d: checkpoint %v below the end %v with everything acked", i, cp, end)
		}
		detached += fm.m.Detaches()
		if !fm.m.Live() {
			t.Errorf("member %d is not on the route after catching up", i)
		}
	}
	t.Logf("%d members, %d log entries, %d detaches of slow members", len(all), len(log), detached)
}

var errDone = fmt.Errorf("done")

// TestFanoutCheckpointHoldsUnacked checks that a member's checkpoint stops
// before its oldest unacknowledged event, and that a member resuming from
// it receives that event first and loses nothing after it.
func TestFanoutCheckpointHoldsUnacked(t *testing.T) {
	db, _ := openDB(t)
	ctx := t.Context()
	const tbl = "fan"
	head := headOf(t, db)
	var route sync.Map // member -> bool
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: tbl, Start: head, Route: func(ev table.Event, deliver func(*table.Member)) {
		route.Range(func(k, _ any) bool { deliver(k.(*table.Member)); return true })
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.Join(head, nil)
	route.Store(m, true)
	for i := range 20 {
		put(t, db, tbl, fmt.Sprintf("r%d", i), "v", fmt.Sprintf("s%d", i), "w")
	}
	var got []table.Event
	for len(got) < 40 {
		ev, ok, err := m.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			select {
			case <-m.Ready():
			case <-time.After(10 * time.Second):
				t.Fatalf("stalled after %d events", len(got))
			}
			continue
		}
		got = append(got, ev)
	}
	// Ack all but event 13 (the second entry of a two-entry commit).
	for i, ev := range got {
		if i != 13 {
			if err := m.Ack(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	cp := m.Checkpoint()
	if !cp.Covers(got[12].Key, got[12].Index) || cp.Covers(got[13].Key, got[13].Index) {
		t.Fatalf("checkpoint %v: want it just before %v", cp, got[13].Cursor())
	}
	m.Close()
	route.Delete(m)
	r := f.Join(cp, nil)
	var again []table.Event
	for len(again) < 40-13 {
		ev, ok, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("resume stopped after %d events", len(again))
		}
		again = append(again, ev)
	}
	for i, ev := range again {
		if ev.Cursor() != got[13+i].Cursor() {
			t.Fatalf("resumed event %d at %v, want %v", i, ev.Cursor(), got[13+i].Cursor())
		}
	}
	if _, ok, _ := r.Next(ctx); ok {
		t.Fatal("resume delivered more than the log holds")
	}
	if !r.Live() {
		t.Fatal("a member that read the whole log is not on the route")
	}
}

// TestFanoutSignalsOncePerBatch commits 100 records in one transaction to
// a member joined with JoinFunc and checks that the follower routed them
// all before it signalled the member, once: a receiver woken per event
// would take one event per wake-up.
func TestFanoutSignalsOncePerBatch(t *testing.T) {
	db, _ := openDB(t)
	ctx := t.Context()
	const tbl, n = "fan", 100
	head := headOf(t, db)
	var m *table.Member
	var ready sync.WaitGroup
	ready.Add(1)
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: tbl, Start: head,
		Route: func(ev table.Event, deliver func(*table.Member)) {
			ready.Wait()
			deliver(m)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	var notified []int // how many events were queued at each notify
	queued := 0
	m = f.JoinFunc(head, nil, func() {
		mu.Lock()
		notified = append(notified, queued)
		mu.Unlock()
	})
	ready.Done()
	// A member joins the route at its first Next that finds nothing left
	// to catch up on; before, it reads the log itself, unsignalled.
	if _, ok, err := m.Next(ctx); err != nil || ok {
		t.Fatalf("first Next: ok %v, %v; want nothing yet", ok, err)
	}
	kv := make([]string, 0, 2*n)
	for i := range n {
		kv = append(kv, fmt.Sprintf("r%d", i), "v")
	}
	put(t, db, tbl, kv...)
	receiveAcked(t, m, n, func(got int) {
		mu.Lock()
		queued = got
		mu.Unlock()
	})
	// The events are queued as they are routed and the signal follows
	// the batch: the receiver, polling, may have them all before it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		k := len(notified)
		mu.Unlock()
		if k > 0 || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond) // room for a wrong second signal
	mu.Lock()
	defer mu.Unlock()
	if len(notified) != 1 {
		t.Fatalf("notified %d times for one committed batch of %d events (events received before each: %v), want once", len(notified), n, notified)
	}
}

// TestMemberBehind checks what a member says of its backlog: behind while
// at least n routed events wait for it, not once it received them, behind
// while it catches up off the route, and never once closed.
func TestMemberBehind(t *testing.T) {
	db, _ := openDB(t)
	ctx := t.Context()
	const tbl = "fan"
	head := headOf(t, db)
	var m *table.Member
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: tbl, Start: head, MaxQueue: 100,
		Route: func(ev table.Event, deliver func(*table.Member)) { deliver(m) }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m = f.JoinFunc(head, nil, func() {})
	if _, ok, err := m.Next(ctx); err != nil || ok {
		t.Fatalf("first Next: ok %v, %v; want nothing yet", ok, err)
	}
	if m.Behind(1) {
		t.Fatal("a member with nothing routed to it says it is behind")
	}
	commit := func(n int) {
		kv := make([]string, 0, 2*n)
		for i := range n {
			kv = append(kv, fmt.Sprintf("r%d", i), "v")
		}
		put(t, db, tbl, kv...)
	}
	receive := func(n int) { receiveAcked(t, m, n, nil) }
	commit(50)
	waitFor(t, "50 events routed", func() bool { return m.Behind(50) })
	if m.Behind(51) {
		t.Fatal("a member with 50 events waiting says it has 51")
	}
	receive(45)
	if m.Behind(6) || !m.Behind(5) {
		t.Fatalf("after receiving 45 of 50: Behind(5) %v, Behind(6) %v; want true, false", m.Behind(5), m.Behind(6))
	}
	receive(5)
	if m.Behind(1) {
		t.Fatal("a member that received every event says it is behind")
	}
	// More than the route holds for it: it leaves the route and is behind
	// whatever its queue, until it has read the log up to the route.
	commit(300)
	waitFor(t, "the member off the route", func() bool { return !m.Live() })
	if !m.Behind(1_000_000) {
		t.Fatal("a member catching up from the log says it is not behind")
	}
	receive(300)
	if _, _, err := m.Next(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the member back on the route", m.Live)
	if m.Behind(1) {
		t.Fatal("a member back on the route with nothing waiting says it is behind")
	}
	commit(10)
	waitFor(t, "10 events routed", func() bool { return m.Behind(10) })
	m.Close()
	if m.Behind(1) {
		t.Fatal("a closed member says it is behind")
	}
}

// waitFor polls cond for up to 10 s, failing the test with what it waited
// for when it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// receiveAcked receives and acknowledges n events of m, polling for up to
// 10 s; each, when set, runs after each event with the count so far. It
// fails the test on an error, or when fewer than n came.
func receiveAcked(t *testing.T, m *table.Member, n int, each func(got int)) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < n && time.Now().Before(deadline); {
		ev, ok, err := m.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(time.Millisecond)
			continue
		}
		if err := m.Ack(ev); err != nil {
			t.Fatal(err)
		}
		got++
		if each != nil {
			each(got)
		}
	}
	if got != n {
		t.Fatalf("received %d of %d events", got, n)
	}
}

// headOf returns db's log head, failing the test when it cannot be read.
func headOf(t *testing.T, db *table.DB) table.Cursor {
	t.Helper()
	head, err := db.Head(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return head
}

// TestFrontierWaitsForRouting checks the two frontiers while the follower
// routes an event: Frontier waits for it and then covers it, so a caller
// that changed the route meanwhile (a new subscription, whose replay reads
// up to Frontier) misses no event routed without the change; a member's
// checkpoint, which may trail, does not wait.
func TestFrontierWaitsForRouting(t *testing.T) {
	db, _ := openDB(t)
	ctx := t.Context()
	const tbl = "fan"
	head := headOf(t, db)
	routing, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	// Before Close, which waits for the follower: a failure below must
	// not leave it in Route.
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	var m *table.Member
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: tbl, Start: head,
		Route: func(ev table.Event, deliver func(*table.Member)) {
			close(routing)
			<-release
			deliver(m)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defer unblock()
	m = f.JoinFunc(head, nil, func() {})
	if _, _, err := m.Next(ctx); err != nil {
		t.Fatal(err)
	}
	put(t, db, tbl, "r", "v")
	<-routing
	if cp := m.Checkpoint(); cp != head {
		t.Fatalf("checkpoint while the event is routed: %v, want the head before it, %v", cp, head)
	}
	got := make(chan table.Cursor, 1)
	go func() { got <- f.Frontier() }()
	select {
	case cp := <-got:
		t.Fatalf("Frontier returned %v while an event was being routed", cp)
	case <-time.After(50 * time.Millisecond):
	}
	unblock()
	after := <-got
	if !head.Less(after) {
		t.Fatalf("Frontier after the event was routed: %v, not past the head before it, %v", after, head)
	}
	receiveAcked(t, m, 1, nil)
	waitFor(t, "the checkpoint past the acknowledged event", func() bool { return m.Checkpoint() == after })
}
