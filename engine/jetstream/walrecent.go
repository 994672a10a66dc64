//go:build !nojetstream

package jetstream

import (
	"sync"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// The recent log keeps at most this many entries and bytes of values.
const (
	recentMaxEntries = 32 << 10
	recentMaxBytes   = 8 << 20
)

// recentLog holds the log entries of the last transaction messages this
// engine published, so that a reader of what was just committed (a live
// tail, woken by Watch) is answered from memory instead of by a request
// to the server per wake-up.
//
// Invariant: every transaction message with log entries at a stream
// sequence >= from that the committer published is in groups, in
// sequence order. That holds because this engine is the stream's only
// writer and adds each group before it applies it to the index; anything
// older (replayed at open, or evicted) is below from and read from the
// stream.
type recentLog struct {
	// maxEntries and maxBytes bound what is kept (recentMaxEntries and
	// recentMaxBytes when zero).
	maxEntries, maxBytes int

	mu      sync.Mutex
	from    uint64
	groups  []recentGroup
	entries int
	bytes   int
}

// recentGroup is one transaction message's log entries, copied out of
// the callers' batches into one buffer.
type recentGroup struct {
	seq  uint64
	logs [][]byte
	size int
}

// reset empties the log; it is complete from sequence from on.
func (r *recentLog) reset(from uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.from, r.groups, r.entries, r.bytes = from, nil, 0, 0
}

// add records the log entries of the transaction message at seq. The
// values are copied: they belong to the callers.
func (r *recentLog) add(seq uint64, logs [][]byte) {
	size := 0
	for _, l := range logs {
		size += len(l)
	}
	buf := make([]byte, 0, size)
	g := recentGroup{seq: seq, logs: make([][]byte, len(logs)), size: size}
	for i, l := range logs {
		buf = append(buf, l...)
		g.logs[i] = buf[len(buf)-len(l) : len(buf) : len(buf)]
	}
	maxEntries, maxBytes := r.maxEntries, r.maxBytes
	if maxEntries <= 0 {
		maxEntries = recentMaxEntries
	}
	if maxBytes <= 0 {
		maxBytes = recentMaxBytes
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = append(r.groups, g)
	r.entries += len(logs)
	r.bytes += size
	drop := 0
	for drop < len(r.groups)-1 && (r.entries > maxEntries || r.bytes > maxBytes) {
		old := &r.groups[drop]
		r.entries -= len(old.logs)
		r.bytes -= old.size
		r.from = old.seq + 1
		drop++
	}
	if drop > 0 {
		r.groups = append(r.groups[:0:0], r.groups[drop:]...)
	}
}

// scan returns the entries with keys >= start in transaction messages up
// to sequence upTo, and true, when the log is complete from start on;
// false when part of that range must be read from the stream.
func (r *recentLog) scan(start, upTo uint64) ([]driver.Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if start>>logShift < r.from || r.from == 0 {
		return nil, false
	}
	var out []driver.Entry
	// Groups are in sequence order; skip those wholly below start.
	i := len(r.groups)
	for i > 0 && r.groups[i-1].seq >= start>>logShift {
		i--
	}
	for ; i < len(r.groups) && r.groups[i].seq <= upTo; i++ {
		g := &r.groups[i]
		for pos, v := range g.logs {
			if k := txKey(g.seq, pos); uint64(k) >= start {
				out = append(out, driver.Entry{Key: k, Count: 1, Value: v})
			}
		}
	}
	return out, true
}
