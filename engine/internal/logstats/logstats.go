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
//
// A backend may also tell it of each commit's entries as it applies them
// (Appended): the next call then counts them from what it was told
// instead of reading them.
type Counter struct {
	mu sync.Mutex
	state

	// feedMu guards what backends told the counter since its last call,
	// apart from mu, so a backend never waits for a call's read.
	feedMu sync.Mutex
	fed    []appended
	spare  []appended // the other buffer: fed and spare swap at each call
	// unsure says fed may miss an applied entry (an apply of unknown
	// outcome, or past maxFed): the next call drops fed and reads.
	unsure bool
	// told says every entry above toldAbove was told of (Start), so
	// that the first count reads no further; mu held.
	told      bool
	toldAbove driver.LogKey
}

// appended is what Appended was told of a run of commits, keys first to
// last: each holds up to about half a mark's worth of entries, so that
// marks stay as close as counting entry by entry keeps them, and a busy
// log of small commits costs a record per few hundred of them.
type appended struct {
	first, last    driver.LogKey
	entries, bytes uint64
}

// maxFed bounds the runs a Counter holds between calls (at least
// maxFed*markEvery/2 entries): past it, the next call reads the log
// instead.
const maxFed = 1 << 12

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
	c.spare = c.takeFed()[:0]
	c.told = false
}

// Start forgets the figures, as Reset, and says that the backend tells
// the counter (Appended, AppendUnknown) of every commit applied from now
// on, above top, the log's highest key: the first count then reads the
// log up to top only. A backend calls it as it opens the log, before any
// commit; on an empty log (top 0) no call reads anything.
func (c *Counter) Start(top driver.LogKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = state{}
	c.spare = c.takeFed()[:0]
	c.told, c.toldAbove = true, top
}

// Appended tells the counter that the backend applied a commit's entries:
// entries of them under key (more than one only where a transaction's
// entries share a key), of bytes in storage together, each as the
// backend's Source reports it. Calls come in key order, each after its
// entries are visible to the Source. It never waits for a Stats call's
// read, so a backend may call it holding its commit lock.
//
// Entries applied but not told of are read by the next Stats only when
// the backend says so first (AppendUnknown): a later Appended moves the
// counted range past them.
func (c *Counter) Appended(key driver.LogKey, entries int, bytes uint64) {
	c.feedMu.Lock()
	n := len(c.fed)
	switch {
	case c.unsure:
	case n > 0 && c.fed[n-1].entries < markEvery/2:
		a := &c.fed[n-1]
		a.last = key
		a.entries += uint64(entries)
		a.bytes += bytes
	case n == maxFed:
		c.unsure = true
	default:
		c.fed = append(c.fed, appended{first: key, last: key, entries: uint64(entries), bytes: bytes})
	}
	c.feedMu.Unlock()
}

// AppendUnknown tells the counter that an apply's outcome is unknown (it
// failed, and its entries may be in the log): the next Stats reads the
// log past what it counted, and Appended is ignored until then.
func (c *Counter) AppendUnknown() {
	c.feedMu.Lock()
	c.unsure = true
	c.feedMu.Unlock()
}

// takeFed returns what Appended was told since the last call and starts
// over; nil when the counter is unsure of it, which also ends what Start
// said. mu held.
func (c *Counter) takeFed() []appended {
	c.feedMu.Lock()
	defer c.feedMu.Unlock()
	fed := c.fed
	c.fed, c.spare = c.spare[:0], nil
	if c.unsure {
		c.unsure = false
		c.told = false
		return nil
	}
	return fed
}

// countFirst counts the log from floor with nothing counted before: what
// lies up to the top Start was given is read, and what was told of since
// is counted from fed; everything is read when Start was not called or a
// commit's outcome was unknown since.
func (c *Counter) countFirst(ctx context.Context, src Source, floor driver.LogKey) error {
	fed := c.takeFed()
	told, above := c.told, c.toldAbove
	c.state = state{floor: floor}
	if !told {
		c.spare = fed[:0]
		return c.tail(ctx, src, floor)
	}
	if above >= floor {
		err := src.Scan(ctx, floor, func(key driver.LogKey, size uint64) bool {
			if key > above {
				return false
			}
			c.count(key, key, 1, size)
			return true
		})
		if err != nil {
			return err
		}
	}
	c.countRuns(fed)
	return c.tail(ctx, src, c.scanned+1)
}

// countFed counts the commits Appended was told of, past those counted;
// mu held. Entries under the floor were truncated before they were
// counted and are not retained: they move the counted range only. A run
// that a read or a truncation cuts in two cannot be split: the entries
// from it on are left to the read that follows.
func (c *Counter) countFed() {
	c.countRuns(c.takeFed())
}

// countRuns counts fed (see countFed) and keeps its array.
func (c *Counter) countRuns(fed []appended) {
	for _, a := range fed {
		switch {
		case a.last <= c.scanned:
			// The read of an earlier call found it first.
		case a.last < c.floor && a.first > c.scanned:
			c.scanned = a.last
		case a.first > c.scanned && a.first >= c.floor:
			c.count(a.first, a.last, a.entries, a.bytes)
		default:
			c.spare = fed[:0]
			return
		}
	}
	c.spare = fed[:0]
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
			err = c.countFirst(ctx, src, floor)
			c.valid = err == nil
		case floor != c.floor:
			if err = c.head(ctx, src, floor); errors.Is(err, errRecount) {
				c.valid = false
				continue
			}
			if err == nil {
				c.countFed()
				err = c.tail(ctx, src, c.scanned+1)
			}
		default:
			// What was told of first; the read then finds only entries
			// applied since, not yet told of.
			c.countFed()
			err = c.tail(ctx, src, c.scanned+1)
		}
		if err != nil {
			// What a failed read took from fed is gone: read it all.
			c.valid, c.told = false, false
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
		c.count(key, key, 1, size)
		return true
	})
}

// count adds entries retained entries of bytes under keys first to last,
// at or above every key counted.
func (c *Counter) count(first, last driver.LogKey, entries, bytes uint64) {
	if first != c.scanned && c.sinceMark >= markEvery {
		// The first entry of a key: the totals before it are whole.
		c.marks = append(c.marks, mark{key: first, entries: c.entries, bytes: c.bytes})
		c.sinceMark = 0
	}
	if c.entries == c.headEntries {
		c.first = first
	}
	c.entries += entries
	c.bytes += bytes
	c.sinceMark += int(entries)
	c.scanned, c.last = last, last
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
