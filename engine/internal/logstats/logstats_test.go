package logstats

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/internal/prop"
)

// sliceLog is a log in memory with the rules of the backends' logs:
// entries appended in key order (several may share a key), a floor
// raised before the entries under it go.
type sliceLog struct {
	floor   driver.LogKey
	entries []entry
}

type entry struct {
	key  driver.LogKey
	size uint64
}

func (l *sliceLog) Floor(context.Context) (driver.LogKey, error) { return l.floor, nil }

func (l *sliceLog) Scan(_ context.Context, from driver.LogKey, fn func(driver.LogKey, uint64) bool) error {
	for _, e := range l.entries {
		if e.key >= from && e.key >= l.floor && !fn(e.key, e.size) {
			return nil
		}
	}
	return nil
}

// want counts the retained log the slow way.
func (l *sliceLog) want() driver.LogStats {
	st := driver.LogStats{Floor: l.floor}
	for _, e := range l.entries {
		if e.key < l.floor {
			continue
		}
		if st.Entries == 0 {
			st.First = e.key
		}
		st.Last = e.key
		st.Entries++
		st.Bytes += e.size
	}
	return st
}

// TestCounterMatchesFullCount appends and truncates at random, deleting
// truncated entries at once or later (as Badger and LMDB do in rounds),
// tells the counter of some commits (Appended) at once, later or never,
// and checks every figure against a count of the whole log.
func TestCounterMatchesFullCount(t *testing.T) {
	ctx := context.Background()
	prop.Check(t, "counter", func(pt *prop.T) {
		var l sliceLog
		var c Counter
		if pt.Bool("started") {
			c.Start(0)
		}
		next := driver.LogKey(1)
		// Commits applied and not yet told of, in key order: a backend
		// tells of them in that order, possibly after a call read them.
		var untold []appended
		tell := func(n int) {
			for _, a := range untold[:n] {
				c.Appended(a.first, int(a.entries), a.bytes)
			}
			untold = untold[n:]
		}
		steps := pt.IntRange(1, 60, "steps")
		for step := range steps {
			switch op := pt.IntRange(0, 12, "op"); {
			case op < 6: // a commit of up to 3,000 entries under one key or one key each
				n := pt.IntRange(1, 3000, "entries")
				shared := pt.Bool("shared key")
				told := pt.Bool("told")
				var a appended
				for i := range n {
					e := entry{key: next, size: uint64(1 + (i+step)%97)}
					l.entries = append(l.entries, e)
					a.first = e.key
					a.entries++
					a.bytes += e.size
					if !shared {
						if told {
							untold = append(untold, a)
						}
						a = appended{}
						next++
					}
				}
				if shared {
					if told {
						untold = append(untold, a)
					}
					next++
				}
				if !told {
					// Its outcome unknown to the backend: whatever it
					// told of before goes first.
					tell(len(untold))
					c.AppendUnknown()
				}
			case op < 8: // the backend tells of some commits
				tell(pt.IntRange(0, len(untold), "tell"))
			case op < 11: // a truncation, possibly above the last key
				below := driver.LogKey(pt.IntRange(int(l.floor), int(next)+10, "below"))
				if below > l.floor {
					l.floor = below
					next = max(next, below)
				}
				if pt.Bool("delete now") {
					kept := l.entries[:0]
					for _, e := range l.entries {
						if e.key >= l.floor {
							kept = append(kept, e)
						}
					}
					l.entries = kept
				}
			case op < 12: // a reopen: the backend says what it will tell of
				tell(len(untold))
				top := driver.LogKey(0)
				if n := len(l.entries); n > 0 {
					top = l.entries[n-1].key
				}
				c.Start(top)
			default:
				c.Reset()
			}
			if pt.Bool("no call") {
				continue
			}
			got, err := c.Stats(ctx, &l)
			if err != nil {
				pt.Fatalf("step %d: %v", step, err)
			}
			if want := l.want(); got != want {
				pt.Fatalf("step %d: got %+v, want %+v", step, got, want)
			}
		}
	})
}

// TestCounterReadsOnlyChanges checks the point of the counter: a call
// after an append reads the new entries only, and one after a
// truncation at most a mark's worth more.
func TestCounterReadsOnlyChanges(t *testing.T) {
	ctx := context.Background()
	l, counted := filledLog(100_000, 10)
	var c Counter
	if _, err := c.Stats(ctx, counted); err != nil {
		t.Fatal(err)
	}
	if counted.read != 100_000 {
		t.Fatalf("first call read %d entries, want 100000", counted.read)
	}
	counted.read = 0
	l.entries = append(l.entries, entry{key: 100_001, size: 10})
	if st, err := c.Stats(ctx, counted); err != nil || st.Entries != 100_001 {
		t.Fatalf("after an append: %+v, %v", st, err)
	}
	if counted.read != 1 {
		t.Fatalf("a call after one append read %d entries, want 1", counted.read)
	}
	counted.read = 0
	l.floor = 50_000
	l.entries = l.entries[49_999:]
	st, err := c.Stats(ctx, counted)
	if err != nil || st.Entries != 50_002 || st.First != 50_000 {
		t.Fatalf("after a truncation: %+v, %v", st, err)
	}
	if counted.read > markEvery+1 {
		t.Fatalf("a call after a truncation read %d entries, want at most %d", counted.read, markEvery+1)
	}
}

// countingLog counts the entries a counter reads.
type countingLog struct {
	*sliceLog
	read int
}

func (l *countingLog) Scan(ctx context.Context, from driver.LogKey, fn func(driver.LogKey, uint64) bool) error {
	return l.sliceLog.Scan(ctx, from, func(k driver.LogKey, size uint64) bool {
		l.read++
		return fn(k, size)
	})
}

// TestCounterToldReadsNothing checks that commits a backend told the
// counter of are counted without a read, and that a told commit a call
// read first is not counted twice.
func TestCounterToldReadsNothing(t *testing.T) {
	ctx := context.Background()
	var l sliceLog
	counted := &countingLog{sliceLog: &l}
	var c Counter
	if _, err := c.Stats(ctx, counted); err != nil {
		t.Fatal(err)
	}
	// More commits than a counter keeps records of: runs of them share one.
	for k := range driver.LogKey(100_000) {
		l.entries = append(l.entries, entry{key: k + 1, size: 10}, entry{key: k + 1, size: 20})
		c.Appended(k+1, 2, 30)
	}
	st, err := c.Stats(ctx, counted)
	if err != nil || st.Entries != 200_000 || st.Bytes != 3_000_000 || st.First != 1 || st.Last != 100_000 {
		t.Fatalf("after 100,000 told commits: %+v, %v", st, err)
	}
	if counted.read != 0 {
		t.Fatalf("the call read %d entries of told commits, want 0", counted.read)
	}
	// Applied, read by a call, and told of after it.
	l.entries = append(l.entries, entry{key: 100_001, size: 7})
	if st, err = c.Stats(ctx, counted); err != nil || st.Entries != 200_001 {
		t.Fatalf("after an untold commit: %+v, %v", st, err)
	}
	c.Appended(100_001, 1, 7)
	if st, err = c.Stats(ctx, counted); err != nil || st.Entries != 200_001 || st.Bytes != 3_000_007 {
		t.Fatalf("after it was told of: %+v, %v", st, err)
	}
}

// TestCounterStartReadsToTop checks that a counter a backend started
// (Start) reads, at its first call, only the log up to the top it was
// given, and counts what it was told of above it.
func TestCounterStartReadsToTop(t *testing.T) {
	ctx := context.Background()
	l, counted := filledLog(300, 5)
	var c Counter
	c.Start(300)
	for k := range driver.LogKey(10_000) {
		l.entries = append(l.entries, entry{key: 301 + k, size: 5})
		c.Appended(301+k, 1, 5)
	}
	st, err := c.Stats(ctx, counted)
	if err != nil || st.Entries != 10_300 || st.Bytes != 51_500 || st.First != 1 || st.Last != 10_300 {
		t.Fatalf("first call: %+v, %v", st, err)
	}
	if counted.read != 301 {
		t.Fatalf("first call read %d entries, want the 300 up to the top and the one after it, where it stops", counted.read)
	}
}

// filledLog returns a log of n entries of size bytes each, keys 1 to n,
// and a view of it that counts the entries read.
func filledLog(n int, size uint64) (*sliceLog, *countingLog) {
	l := &sliceLog{}
	for k := range driver.LogKey(n) {
		l.entries = append(l.entries, entry{key: k + 1, size: size})
	}
	return l, &countingLog{sliceLog: l}
}
