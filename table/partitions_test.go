package table_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// The key-to-partition mapping is stored format: these values must never
// change.
func TestPartitionOfStable(t *testing.T) {
	for _, c := range []struct {
		key   string
		n, of int
	}{{"", 3, 2}, {"a", 3, 1}, {"client-1", 3, 0}, {"sensor/42", 3, 1}, {"a", 7, 5}, {"tidemark", 7, 1}, {"a", 1, 0}} {
		if got := table.PartitionOf(c.key, c.n); got != c.of {
			t.Errorf("PartitionOf(%q, %d) = %d, want %d", c.key, c.n, got, c.of)
		}
	}
	counts := make([]int, 3)
	for i := range 3000 {
		counts[table.PartitionOf(fmt.Sprintf("device-%d", i), 3)]++
	}
	for i, n := range counts {
		if n < 850 || n > 1150 {
			t.Errorf("partition %d of 3 got %d of 3000 keys: %v", i, n, counts)
		}
	}
}

func TestCursorsEncoding(t *testing.T) {
	cs := table.Cursors{{}, {Key: 5}, {Key: 1 << 40, Next: 3}}
	if got := cs.String(); got != "0,5,1099511627776.3" {
		t.Fatalf("String = %q", got)
	}
	txt, _ := cs.MarshalText()
	var back table.Cursors
	if err := back.UnmarshalText(txt); err != nil || !slices.Equal(back, cs) {
		t.Fatalf("text round trip: %v %v", back, err)
	}
	bin, _ := cs.MarshalBinary()
	back = nil
	if err := back.UnmarshalBinary(bin); err != nil || !slices.Equal(back, cs) {
		t.Fatalf("binary round trip: %v %v", back, err)
	}
	for _, bad := range []string{"", "1,,2", "1,x", "3.0"} {
		if err := back.UnmarshalText([]byte(bad)); !errors.Is(err, table.ErrBadCursor) {
			t.Errorf("UnmarshalText(%q) = %v, want ErrBadCursor", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {1}, {1, 8, 0}, append(slices.Clone(bin), 0), bin[:len(bin)-1]} {
		if err := back.UnmarshalBinary(bad); !errors.Is(err, table.ErrBadCursor) {
			t.Errorf("UnmarshalBinary(%x) = %v, want ErrBadCursor", bad, err)
		}
	}
}

// openEngines opens n engines in dirs of their own (new ones when dirs is
// nil) and closes them when the test ends.
func openEngines(t *testing.T, dirs []string, n int) ([]engine.Engine, []string) {
	t.Helper()
	if dirs == nil {
		for range n {
			dirs = append(dirs, t.TempDir())
		}
	}
	var es []engine.Engine
	for _, d := range dirs[:n] {
		e, err := engine.Open(context.Background(), engineName(), engine.Options{Dir: d, Sync: engine.SyncNone})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		es = append(es, e)
	}
	return es, dirs
}

func closeEngines(es []engine.Engine) {
	for _, e := range es {
		_ = e.Close()
	}
}

func openParts(t *testing.T, es []engine.Engine) *table.Partitions {
	t.Helper()
	p, err := table.OpenPartitions(context.Background(), es, table.Options{})
	if err != nil {
		t.Fatalf("open partitions: %v", err)
	}
	return p
}

// A partition set records its count and order: opening it otherwise, or
// one partition alone, is refused, and the set reads its records again.
func TestPartitionsRefuseAnotherLayout(t *testing.T) {
	ctx := context.Background()
	es, dirs := openEngines(t, nil, 3)
	p := openParts(t, es)
	for i := range 30 {
		id := fmt.Sprintf("k%d", i)
		tx := p.For(id).Begin()
		_ = tx.Put("t", id, []byte(id))
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = p.Close()
	closeEngines(es)

	es, _ = openEngines(t, dirs, 3)
	for _, c := range []struct {
		name string
		open func() error
		want string
	}{
		{"two of three", func() error { _, err := table.OpenPartitions(ctx, es[:2], table.Options{}); return err }, "partition 0 of 2 holds partition 0 of 3"},
		{"swapped", func() error {
			_, err := table.OpenPartitions(ctx, []engine.Engine{es[1], es[0], es[2]}, table.Options{})
			return err
		}, "partition 0 of 3 holds partition 1 of 3"},
		{"alone", func() error { _, err := table.Open(ctx, es[2], table.Options{}); return err }, "holds partition 2 of 3: open all of them with OpenPartitions"},
	} {
		err := c.open()
		if !errors.Is(err, table.ErrPartitionMismatch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrPartitionMismatch saying %q", c.name, err, c.want)
		}
	}
	p = openParts(t, es)
	defer p.Close()
	for i := range 30 {
		id := fmt.Sprintf("k%d", i)
		if r, err := p.For(id).Get(ctx, "t", id); err != nil || string(r.Value) != id {
			t.Fatalf("get %s from partition %d: %v", id, p.Of(id), err)
		}
	}
}

// A store made unpartitioned opens as the only partition, not as one of
// several.
func TestPartitionsOfExistingStore(t *testing.T) {
	ctx := context.Background()
	db, e := openDB(t)
	put(t, db, "t", "a", "1")
	_ = db.Close()
	if _, err := table.OpenPartitions(ctx, []engine.Engine{e, openDBEngine(t)}, table.Options{}); !errors.Is(err, table.ErrPartitionMismatch) ||
		!strings.Contains(err.Error(), "made unpartitioned") {
		t.Fatalf("an unpartitioned store as partition 0 of 2: %v", err)
	}
	p := openParts(t, []engine.Engine{e})
	defer p.Close()
	if r, err := p.For("a").Get(ctx, "t", "a"); err != nil || string(r.Value) != "1" {
		t.Fatalf("get: %v %v", r, err)
	}
	// A store opened and closed without a write holds nothing to misplace.
	unused := openDBEngine(t)
	db2, err := table.Open(ctx, unused, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = db2.Close()
	p2, err := table.OpenPartitions(ctx, []engine.Engine{unused, openDBEngine(t)}, table.Options{})
	if err != nil {
		t.Fatalf("a store opened without a write, as partition 0 of 2: %v", err)
	}
	_ = p2.Close()
}

func openDBEngine(t *testing.T) engine.Engine {
	es, _ := openEngines(t, nil, 1)
	return es[0]
}

// Versions come from one clock: they increase across partitions.
func TestPartitionsShareTheClock(t *testing.T) {
	es, _ := openEngines(t, nil, 3)
	p := openParts(t, es)
	defer p.Close()
	var last table.Version
	for i := range 30 {
		v := put(t, p.DB(i%3), "t", "x", "v")
		if v <= last {
			t.Fatalf("commit %d on partition %d got version %d, after %d", i, i%3, v, last)
		}
		last = v
	}
}

// A subscription to every partition delivers each partition's events in
// its log order, and resumes from its checkpoint without losing what was
// not acknowledged, or delivering again what the checkpoint covers.
func TestPartitionsSubscribeResume(t *testing.T) {
	ctx := context.Background()
	es, _ := openEngines(t, nil, 3)
	p := openParts(t, es)
	defer p.Close()
	const n = 300
	for i := range n {
		id := fmt.Sprintf("k%03d", i)
		put(t, p.For(id), "t", id, "v")
	}
	if _, err := p.Subscribe(ctx, make(table.Cursors, 2), table.SubscribeOptions{}); !errors.Is(err, table.ErrBadCursor) {
		t.Fatalf("two cursors for three partitions: %v", err)
	}
	start := make(table.Cursors, 3)
	acked := map[string]bool{}
	for round := 0; len(acked) < n; round++ {
		if round > 40 {
			t.Fatalf("%d of %d acknowledged after 40 rounds", len(acked), n)
		}
		s, err := p.Subscribe(ctx, start, table.SubscribeOptions{Table: "t", IncludeSuperseded: true, Buffer: 7})
		if err != nil {
			t.Fatal(err)
		}
		last := make(table.Cursors, 3)
		timeout := time.After(10 * time.Second)
		var held []table.Event
		for got := 0; got < 60 && len(acked)+len(held) < n; got++ {
			var ev table.Event
			select {
			case ev = <-s.Events():
			case <-timeout:
				t.Fatalf("round %d: timed out", round)
			}
			i := s.Partition(ev)
			if i != p.Of(ev.ID) {
				t.Fatalf("%s came from partition %d, it is in %d", ev.ID, i, p.Of(ev.ID))
			}
			if !last[i].Less(ev.Cursor()) {
				t.Fatalf("partition %d: %s at %s after %s", i, ev.ID, ev.Cursor(), last[i])
			}
			last[i] = ev.Cursor()
			if start[i].Covers(ev.Key, ev.Index) {
				t.Fatalf("round %d: %s delivered again below the checkpoint %s it resumed from", round, ev.ID, start)
			}
			if got%5 == 0 && round < 5 {
				held = append(held, ev) // never acknowledged in this round
				continue
			}
			if err := s.Ack(ev); err != nil {
				t.Fatal(err)
			}
			acked[ev.ID] = true
		}
		_ = s.Close()
		if err := s.Err(); err != nil {
			t.Fatalf("after Close: %v", err)
		}
		start = s.Checkpoint()
		for _, ev := range held {
			if i := s.Partition(ev); start[i].Covers(ev.Key, ev.Index) {
				t.Fatalf("checkpoint %s passed %s, never acknowledged", start, ev.ID)
			}
		}
	}
}

// A partition that ends its subscription ends the merged one, with its
// cause.
func TestPartitionsSubscribeEndsWithAPartition(t *testing.T) {
	es, _ := openEngines(t, nil, 2)
	p := openParts(t, es)
	s, err := p.Subscribe(context.Background(), make(table.Cursors, 2), table.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.DB(1).Close()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still running after partition 1 closed")
	}
	if err := s.Err(); !errors.Is(err, table.ErrClosed) || !strings.Contains(err.Error(), "partition 1") {
		t.Fatalf("Err = %v, want ErrClosed of partition 1", err)
	}
	_ = p.Close()
	other, _ := openEngines(t, nil, 1)
	p2 := openParts(t, other)
	defer p2.Close()
	s2, err := p2.Subscribe(context.Background(), make(table.Cursors, 1), table.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	var ev table.Event
	if err := s2.Ack(ev); err == nil {
		t.Fatal("ack of an event the subscription did not deliver succeeded")
	}
}

// The newest state of a record several partitions write wins, a deletion
// included.
func TestPartitionsGetLatest(t *testing.T) {
	ctx := context.Background()
	es, _ := openEngines(t, nil, 3)
	p := openParts(t, es)
	defer p.Close()
	if _, at, err := p.GetLatest(ctx, "r", "x"); !errors.Is(err, table.ErrNotFound) || at != -1 {
		t.Fatalf("never written: partition %d, %v", at, err)
	}
	for _, c := range []struct {
		part int
		del  bool
		val  string
	}{{1, false, "a"}, {0, false, "b"}, {2, false, "c"}, {0, true, ""}, {1, false, "d"}} {
		tx := p.DB(c.part).Begin()
		if c.del {
			_ = tx.Delete("r", "x")
		} else {
			_ = tx.Put("r", "x", []byte(c.val))
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		r, at, err := p.GetLatest(ctx, "r", "x")
		if at != c.part {
			t.Fatalf("after a write to partition %d, the newest is in %d", c.part, at)
		}
		if c.del {
			if !errors.Is(err, table.ErrNotFound) || !r.Deleted {
				t.Fatalf("after the deletion: %q, %v", r.Value, err)
			}
			continue
		}
		if err != nil || string(r.Value) != c.val {
			t.Fatalf("after writing %q to partition %d: %q, %v", c.val, c.part, r.Value, err)
		}
	}
}
