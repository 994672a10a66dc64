package kvlog

import (
	"bytes"
	"sync"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Recent keeps the log entries of a backend's latest commits in memory, so
// a reader that keeps up with the log (the table layer's tail scans it
// after every commit) reads them without seeking an iterator of the store,
// which at one message at a time cost a tenth of a broker's CPU.
//
// It holds, in log order, every entry committed after the one before its
// oldest: none is missing between two held entries and none was committed
// after the last one. A scan from any position at or after the oldest held
// entry is therefore answered from memory alone, and, while it holds the
// whole log (see Open), a scan from anywhere. The backend adds each
// commit's entries in log order before any reader may count on them (before
// they are durable, or before its Watch announces them), and resets it when
// it no longer knows what was committed (a failed write); it then covers
// nothing until the next commit. The zero value is empty and ready.
type Recent struct {
	mu      sync.RWMutex
	entries []heldEntry
	bytes   int
	// whole says the entries held are the whole log: none was dropped
	// since Open found the log empty.
	whole bool
}

// heldEntry is one held entry and its stored key.
type heldEntry struct {
	key   [LogKeyLen]byte
	entry driver.Entry
}

// The bounds of a Recent; past either it drops its older half. A reader
// further behind scans the store.
const (
	recentMaxEntries = 4096
	recentMaxBytes   = 4 << 20
)

// Add appends the entries of one commit, stored under key k: their
// payloads, kept, not copied, so the caller must not modify them
// afterwards (scans hand them out as they are).
func (r *Recent) Add(k driver.LogKey, payloads [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint32(len(payloads))
	for i, v := range payloads {
		re := heldEntry{entry: driver.Entry{Key: k, Index: uint32(i), Count: n, Value: v}}
		PutLogKey(re.key[:], k, uint32(i))
		if r.entries == nil {
			r.entries = make([]heldEntry, 0, recentMaxEntries+1)
		}
		r.entries = append(r.entries, re)
		r.bytes += len(v)
	}
	if len(r.entries) > recentMaxEntries || r.bytes > recentMaxBytes {
		drop := len(r.entries) / 2
		for _, re := range r.entries[:drop] {
			r.bytes -= len(re.entry.Value)
		}
		r.whole = false
		// In place: readers copy what they return under the read lock.
		n := copy(r.entries, r.entries[drop:])
		clear(r.entries[n:])
		r.entries = r.entries[:n]
	}
}

// Open starts r over a store's log as the backend opened it: last holds the
// payloads of the log's last commit, stored under key k, in index order
// (kept, not copied), or nothing when the log is empty. Scans from that
// commit on are then answered from memory: the end of the log, which the
// table layer reads on every subscription's start and every session's
// setup, needs no read of the store even before the first commit.
func (r *Recent) Open(k driver.LogKey, last [][]byte) {
	r.mu.Lock()
	r.resetLocked()
	r.whole = len(last) == 0
	r.mu.Unlock()
	if len(last) > 0 {
		r.Add(k, last)
	}
}

// Len returns the number of entries held.
func (r *Recent) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// Reset drops every held entry.
func (r *Recent) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resetLocked()
}

func (r *Recent) resetLocked() {
	r.entries, r.bytes, r.whole = nil, 0, false
}

// oldestLocked returns the lowest seek the held entries cover: the oldest
// one's stored key, or the key prefix of its commit when they hold all of
// that commit's entries (no stored key lies between the two).
func (r *Recent) oldestLocked() []byte {
	first := &r.entries[0]
	if first.entry.Index == 0 {
		return first.key[:logSeekLen]
	}
	return first.key[:]
}

// Page appends to dst[:0] up to max held entries stored at or after seek
// (a stored log key or a prefix of one) with keys up to durable, and
// returns them and the seek of the next page when one may follow (nil when
// none does): a PageReader's answer. Their values are the held ones, which
// nothing modifies (see driver.Entry). covered is false when entries
// before the held ones may be at or after seek: the caller reads the store
// instead.
func (r *Recent) Page(dst []driver.Entry, seek []byte, durable driver.LogKey, max int) (page []driver.Entry, next []byte, covered bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.whole && (len(r.entries) == 0 || bytes.Compare(seek, r.oldestLocked()) < 0) {
		return nil, nil, false
	}
	lo, hi := 0, len(r.entries)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(r.entries[m].key[:], seek) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	page = dst[:0]
	for _, re := range r.entries[lo:] {
		if re.entry.Key > durable {
			return page, nil, true
		}
		if len(page) == max {
			return page, bytes.Clone(re.key[:]), true
		}
		page = append(page, re.entry)
	}
	return page, nil, true
}
