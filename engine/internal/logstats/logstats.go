// Package logstats keeps the figures of a key-value backend's change log
// (driver.LogStats) up to date by reading only what changed since they were
// last asked for: the entries appended since, and, after a truncation, the
// few entries between the new floor and the nearest mark. Counting the
// whole log at every call cost a read of every retained entry, and the
// broker asks at every retention pass.
package logstats

import (
	"context"
	"errors"
	"sync"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Source is the log a Counter counts. Each Source a Counter is given sees
// the log as it is at that moment or later than the one before it.
type Source interface {
	// Floor returns the truncation floor: no entry below it is retained.
	// A backend raises it before it deletes the entries below it, so the
	// entries at and above the floor are the retained log at any moment.
	Floor(ctx context.Context) (driver.LogKey, error)
	// Scan calls fn for each retained entry with key at or above from,
	// in log order, with the entry's key and its size in storage, until
	// fn returns false or the log ends.
	Scan(ctx context.Context, from driver.LogKey, fn func(key driver.LogKey, size uint64) bool) error
}

// errRecount makes Stats count the whole log again.
var errRecount = errors.New("logstats: count again")

// markEvery is how many entries apart the Counter keeps marks: a count
// after a truncation reads at most this many entries.
const markEvery = 1024

// mark records the counts of every entry before the first entry of key,
// since the Counter started counting.
type mark struct {
	key     driver.LogKey
	entries uint64
	bytes   uint64
}

// Counter holds a log's figures between calls. Entries are appended in
// key order above every retained entry and removed only from the bottom
// (a truncation), so counts taken from the first count on stay valid:
// the retained figures are the running totals less those before the
// first retained entry.
//
// The zero Counter is ready; it counts the whole log at its first call.
type Counter struct {
	mu sync.Mutex
	state
}

// state is what a Counter holds between calls.
type state struct {
	valid bool
	floor driver.LogKey // the floor the figures below were taken at
	// scanned is the highest key counted, retained or not: the next call
	// counts from the key after it.
	scanned driver.LogKey
	// Running totals of every entry counted, and of those before the
	// first retained entry.
	entries, bytes         uint64
	headEntries, headBytes uint64
	first, last            driver.LogKey // the retained range; zero when empty
	sinceMark              int
	marks                  []mark // ascending keys, all at or above floor
}

// Reset forgets the figures: the next call counts the whole log again.
// Backends call it when the log on disk may differ from what was counted
// (a reopen after a write of unknown outcome).
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = state{}
}

// Stats returns the log's figures: First, Last, Entries and Bytes of the
// retained entries, and Floor.
func (c *Counter) Stats(ctx context.Context, src Source) (driver.LogStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		floor, err := src.Floor(ctx)
		if err != nil {
			return driver.LogStats{}, err
		}
		switch {
		case !c.valid:
			c.state = state{floor: floor}
			err = c.tail(ctx, src, floor)
			c.valid = err == nil
		case floor != c.floor:
			if err = c.head(ctx, src, floor); errors.Is(err, errRecount) {
				c.valid = false
				continue
			}
			if err == nil {
				err = c.tail(ctx, src, c.scanned+1)
			}
		default:
			err = c.tail(ctx, src, c.scanned+1)
		}
		if err != nil {
			c.valid = false
			return driver.LogStats{}, err
		}
		// A truncation that raised the floor while this ran may have
		// removed entries counted as retained: count again from it.
		now, err := src.Floor(ctx)
		if err != nil {
			return driver.LogStats{}, err
		}
		if now == floor {
			return c.stats(), nil
		}
	}
}

func (c *Counter) stats() driver.LogStats {
	st := driver.LogStats{Floor: c.floor, Entries: c.entries - c.headEntries, Bytes: c.bytes - c.headBytes}
	if st.Entries > 0 {
		st.First, st.Last = c.first, c.last
	}
	return st
}

// tail counts the entries from key from on.
func (c *Counter) tail(ctx context.Context, src Source, from driver.LogKey) error {
	return src.Scan(ctx, from, func(key driver.LogKey, size uint64) bool {
		if key != c.scanned && c.sinceMark >= markEvery {
			// The first entry of a key: the totals before it are whole.
			c.marks = append(c.marks, mark{key: key, entries: c.entries, bytes: c.bytes})
			c.sinceMark = 0
		}
		if c.entries == c.headEntries {
			c.first = key
		}
		c.entries++
		c.bytes += size
		c.sinceMark++
		c.scanned, c.last = key, key
		return true
	})
}

// head moves the figures to a floor a truncation raised: the totals
// before the first retained entry are those at the nearest mark above
// the floor, less the entries from the floor to that mark.
func (c *Counter) head(ctx context.Context, src Source, floor driver.LogKey) error {
	i := 0
	for i < len(c.marks) && c.marks[i].key < floor {
		i++
	}
	c.marks = c.marks[i:]
	// The entries from the floor up to the nearest mark, or to the last
	// counted, whose totals before them are known.
	stop := mark{key: c.scanned + 1, entries: c.entries, bytes: c.bytes}
	if len(c.marks) > 0 {
		stop = c.marks[0]
	}
	var n, b uint64
	first := stop.key
	err := src.Scan(ctx, floor, func(key driver.LogKey, size uint64) bool {
		if key >= stop.key {
			return false
		}
		if n == 0 {
			first = key
		}
		n++
		b += size
		return true
	})
	if err != nil {
		return err
	}
	if n > stop.entries {
		// Entries the totals never held: a source older than the one
		// counted before (Source promises newer each time).
		return errRecount
	}
	c.headEntries, c.headBytes = stop.entries-n, stop.bytes-b
	c.first, c.floor = first, floor
	if c.entries == c.headEntries {
		c.first = 0
	}
	return nil
}
