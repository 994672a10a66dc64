package conformance

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Partitioned tables: the resume guarantees of a subscription, kept in
// each partition when the tables are split over several engines of the
// target (on JetStream, several streams).
func init() {
	register("resume",
		Case{Name: "C25_partitioned_writers_and_resuming_subscribers", Run: casePartitionedWritersAndResumingSubscribers},
		Case{Name: "C26_partition_layout_is_kept", Run: casePartitionLayoutIsKept},
		Case{Name: "C27_partitioned_fanout", Run: casePartitionedFanout},
	)
}

// openPartitions opens n engines of tg, in dirs (new ones when nil), as
// the partitions of one set of tables; all are closed when the case ends.
func openPartitions(t T, tg Target, dirs []string, n int) (*table.Partitions, []engine.Engine, []string) {
	t.Helper()
	for len(dirs) < n {
		dirs = append(dirs, t.TempDir())
	}
	var es []engine.Engine
	for _, d := range dirs[:n] {
		e, err := tg.TryOpen(t.Context(), d, func(o *engine.Options) { o.Sync = engine.SyncNone })
		if err != nil {
			t.Fatalf("open %s in %s: %v", tg.Engine, d, err)
		}
		t.Cleanup(func() { _ = e.Close() })
		es = append(es, e)
	}
	p, err := table.OpenPartitions(t.Context(), es, table.Options{})
	if err != nil {
		t.Fatalf("open %d partitions on %s: %v", n, tg.Engine, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, es, dirs
}

// partitionRun is what one subscription instance received.
type partitionRun struct {
	start table.Cursors
	evs   []table.Event
	parts []int
}

// receiveQuiet receives from s until want events came or none came for
// quiet.
func receiveQuiet(s *table.PartitionSubscription, want int, quiet time.Duration) []table.Event {
	var evs []table.Event
	for len(evs) < want {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-time.After(quiet):
			return evs
		}
	}
	return evs
}

// Writers commit transactions of one to three records to three
// partitions (the records of a transaction share a group, which names the
// partition) while subscribers to every partition take a random number of
// events, acknowledge a random prefix of them, stop, and resume from their
// checkpoint. Each instance must receive each partition's events in log
// order, from a partition its group routes to, none its checkpoint covers,
// and for every record a gap-free run of its versions; after a final
// catch-up every subscriber holds every version.
func casePartitionedWritersAndResumingSubscribers(t T, tg Target) {
	seed := rand.Uint64()
	p, _, _ := openPartitions(t, tg, nil, 3)
	deadline := time.Now().Add(1200 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(deadline) {
				g := fmt.Sprintf("g%d", rng.IntN(9))
				tx := p.For(g).Begin()
				for k := range 1 + rng.IntN(3) {
					_ = tx.Put("t", fmt.Sprintf("%s/%d", g, k), nil)
				}
				if err := tx.Commit(t.Context()); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				time.Sleep(time.Millisecond) // keep the history small enough to check
			}
		}()
	}
	opts := table.SubscribeOptions{Table: "t", IncludeSuperseded: true}
	runs := make([][]partitionRun, 2)
	saved := make([]table.Cursors, len(runs))
	var subs sync.WaitGroup
	for i := range runs {
		subs.Add(1)
		go func() {
			defer subs.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			saved[i] = make(table.Cursors, p.Count())
			for time.Now().Before(deadline) && !t.Failed() {
				s, err := p.Subscribe(t.Context(), saved[i], opts)
				if err != nil {
					t.Errorf("subscribe: %v", err)
					return
				}
				evs := receiveQuiet(s, 1+rng.IntN(80), 200*time.Millisecond)
				for _, ev := range evs[:rng.IntN(len(evs)+1)] {
					_ = s.Ack(ev)
				}
				run := partitionRun{start: saved[i], evs: evs}
				for _, ev := range evs {
					run.parts = append(run.parts, s.Partition(ev))
				}
				_ = s.Close()
				if err := s.Err(); err != nil {
					t.Errorf("subscription ended with %v", err)
				}
				saved[i] = s.Checkpoint()
				runs[i] = append(runs[i], run)
			}
		}()
	}
	wg.Wait()
	subs.Wait()
	if t.Failed() {
		return
	}
	// The writers are done: each partition's log is read to its end, one
	// partition after the other, with nothing left to wait for.
	catchUp := func(start table.Cursors) partitionRun {
		run := partitionRun{start: start}
		for i := range p.Count() {
			o := opts
			o.Start, o.Hooks = start[i], table.Hooks{Live: func() bool { return false }}
			if _, err := p.DB(i).Follow(t.Context(), o, func(ev table.Event) error {
				run.evs, run.parts = append(run.evs, ev), append(run.parts, i)
				return nil
			}); err != nil {
				t.Fatalf("read partition %d from %s: %v", i, start[i], err)
			}
		}
		return run
	}
	canon := map[string][]table.Version{}
	for _, ev := range catchUp(make(table.Cursors, p.Count())).evs {
		canon[ev.ID] = append(canon[ev.ID], ev.Version)
	}
	for i := range runs {
		runs[i] = append(runs[i], catchUp(saved[i]))
		have := map[string][]table.Version{}
		for n, run := range runs[i] {
			last := slices.Clone(run.start)
			per := map[string][]table.Version{}
			for j, ev := range run.evs {
				part := run.parts[j]
				g, _, _ := strings.Cut(ev.ID, "/")
				switch {
				case part != p.Of(g):
					t.Fatalf("subscriber %d, instance %d: %s came from partition %d, its group is in %d (seed %d)", i, n, ev.ID, part, p.Of(g), seed)
				case run.start[part].Covers(ev.Key, ev.Index):
					t.Fatalf("subscriber %d, instance %d: %s at %s again, below the checkpoint %s it resumed from (seed %d)", i, n, ev.ID, ev.Cursor(), run.start, seed)
				case !last[part].Less(ev.Cursor()):
					t.Fatalf("subscriber %d, instance %d: partition %d delivered %s after %s (seed %d)", i, n, part, ev.Cursor(), last[part], seed)
				}
				last[part] = ev.Cursor()
				per[ev.ID] = append(per[ev.ID], ev.Version)
			}
			checkVersionRuns(t, fmt.Sprintf("subscriber %d, instance %d", i, n), per, canon, have, seed)
		}
		checkHoldsAll(t, fmt.Sprintf("subscriber %d", i), have, canon, seed)
	}
	if len(canon) == 0 {
		t.Fatalf("the writers committed nothing")
	}
}

// Partitions reopen only as they were made: the same count, the same
// order; a partition alone is refused, and so is a store with data as one
// of several. Reopened as made, every record is where its key routes.
func casePartitionLayoutIsKept(t T, tg Target) {
	p, es, dirs := openPartitions(t, tg, nil, 3)
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
		tx := p.For(ids[i]).Begin()
		_ = tx.Put("t", ids[i], []byte(ids[i]))
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	_ = p.Close()
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, table.ErrPartitionMismatch) {
			t.Fatalf("%s: %v, want ErrPartitionMismatch", what, err)
		}
	}
	_, err := table.OpenPartitions(t.Context(), es[:2], table.Options{})
	refused("two of three", err)
	_, err = table.OpenPartitions(t.Context(), []engine.Engine{es[2], es[1], es[0]}, table.Options{})
	refused("in reverse", err)
	_, err = table.Open(t.Context(), es[1], table.Options{})
	refused("one alone", err)
	fresh, err := tg.TryOpen(t.Context(), t.TempDir())
	if err != nil {
		t.Fatalf("open a fresh %s: %v", tg.Engine, err)
	}
	defer fresh.Close()
	_, err = table.OpenPartitions(t.Context(), []engine.Engine{fresh, es[0]}, table.Options{})
	refused("partition 0 of 3 as 1 of 2", err)
	for _, e := range es {
		_ = e.Close()
	}
	p, _, _ = openPartitions(t, tg, dirs, 3)
	for _, id := range ids {
		r, err := p.For(id).Get(t.Context(), "t", id)
		if err != nil || string(r.Value) != id {
			t.Fatalf("%s in partition %d after reopening: %q, %v", id, p.Of(id), r.Value, err)
		}
	}
}

// A fanout over three partitions, its route delivering every event to
// every member, while transactions of one to three records land in all
// partitions: a member joined at the start of the logs (catching up, then
// on the route), one joined at the head, and one closed midway and
// rejoined from its checkpoint each receive every record once per
// version, in each partition's log order, nothing the checkpoint covered
// again.
func casePartitionedFanout(t T, tg Target) {
	p, _, _ := openPartitions(t, tg, nil, 3)
	commit := func(from, to int) {
		for g := from; g < to; g++ {
			gid := fmt.Sprintf("g%d", g)
			tx := p.For(gid).Begin()
			for k := range 1 + g%3 {
				_ = tx.Put("t", fmt.Sprintf("%s/%d", gid, k), nil)
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Errorf("commit: %v", err)
				return
			}
		}
	}
	commit(0, 60)
	head, err := p.Head(t.Context())
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	var mu sync.Mutex
	var members []*table.PartitionMember
	pf, err := p.NewFanout(t.Context(), table.PartitionFanoutOptions{Table: "t", Start: head,
		Route: func(_ int, _ table.Event, deliver func(*table.PartitionMember)) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range members {
				deliver(m)
			}
		}})
	if err != nil {
		t.Fatalf("fanout: %v", err)
	}
	defer pf.Close()
	join := func(start table.Cursors) *table.PartitionMember {
		m, err := pf.Join(start, nil)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		mu.Lock()
		members = append(members, m)
		mu.Unlock()
		return m
	}
	want := func(from, to int) map[string]bool {
		out := map[string]bool{}
		for g := from; g < to; g++ {
			for k := range 1 + g%3 {
				out[fmt.Sprintf("g%d/%d", g, k)] = true
			}
		}
		return out
	}
	// receive takes n events, acking them, checking partition, order and
	// that none is covered by start or came twice.
	receive := func(name string, m *table.PartitionMember, start table.Cursors, n int) map[string]bool {
		got := map[string]bool{}
		last := slices.Clone(start)
		deadline := time.Now().Add(20 * time.Second)
		for len(got) < n {
			ev, ok, err := m.Next(t.Context())
			switch {
			case err != nil:
				t.Fatalf("%s: next: %v", name, err)
			case !ok:
				if time.Now().After(deadline) {
					t.Fatalf("%s: received %d of %d", name, len(got), n)
				}
				select {
				case <-m.Ready():
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			i := m.Partition(ev)
			g, _, _ := strings.Cut(ev.ID, "/")
			switch {
			case i != p.Of(g):
				t.Fatalf("%s: %s from partition %d, its group is in %d", name, ev.ID, i, p.Of(g))
			case !last[i].Less(ev.Cursor()):
				t.Fatalf("%s: partition %d delivered %s after %s", name, i, ev.Cursor(), last[i])
			case got[ev.ID]:
				t.Fatalf("%s: %s twice", name, ev.ID)
			}
			last[i] = ev.Cursor()
			got[ev.ID] = true
			if err := m.Ack(ev); err != nil {
				t.Fatalf("%s: ack: %v", name, err)
			}
		}
		return got
	}
	old, live, mid := join(make(table.Cursors, 3)), join(head), join(head)
	done := make(chan struct{})
	go func() { defer close(done); commit(60, 120) }()
	half := receive("mid", mid, head, len(want(60, 90)))
	cp := mid.Checkpoint()
	mid.Close()
	<-done
	if got := receive("from the start", old, make(table.Cursors, 3), len(want(0, 120))); !maps.Equal(got, want(0, 120)) {
		t.Fatalf("from the start: %d records, want %d", len(got), len(want(0, 120)))
	}
	if got := receive("from the head", live, head, len(want(60, 120))); !maps.Equal(got, want(60, 120)) {
		t.Fatalf("from the head: %d records, want %d", len(got), len(want(60, 120)))
	}
	rest := receive("rejoined", join(cp), cp, len(want(60, 120))-len(half))
	for id := range rest {
		if half[id] {
			t.Fatalf("rejoined from its checkpoint: %s again", id)
		}
	}
	maps.Copy(rest, half)
	if !maps.Equal(rest, want(60, 120)) {
		t.Fatalf("closed and rejoined: %d records, want %d", len(rest), len(want(60, 120)))
	}
}
