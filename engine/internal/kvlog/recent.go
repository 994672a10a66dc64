package kvlog

import (
	"bytes"
	"encoding/binary"
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
// entry is therefore answered from memory alone. The backend adds each
// commit's entries in log order before any reader may count on them (before
// they are durable, or before its Watch announces them), and resets it when
// it no longer knows what was committed (a failed write, a reopen); it then
// covers nothing until the next commit. The zero value is empty and ready.
type Recent struct {
	mu      sync.RWMutex
	entries []heldEntry
	bytes   int
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

// Add appends the entries of one commit, stored under key k with the
// values vals (in LogValue form; kept, not copied).
func (r *Recent) Add(k driver.LogKey, vals [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint32(len(vals))
	for i, v := range vals {
		var re heldEntry
		re.key[0] = LogPrefix
		binary.BigEndian.PutUint64(re.key[1:], uint64(k))
		binary.BigEndian.PutUint32(re.key[9:], uint32(i))
		e, err := decodeEntry(re.key[:], v)
		if err != nil || e.Count != n {
			// Cannot happen for values built by LogValue; a gap would,
			// so cover nothing rather than skip it.
			r.resetLocked()
			return
		}
		re.entry = e
		if r.entries == nil {
			r.entries = make([]heldEntry, 0, recentMaxEntries+1)
		}
		r.entries = append(r.entries, re)
		r.bytes += len(e.Value)
	}
	if len(r.entries) > recentMaxEntries || r.bytes > recentMaxBytes {
		drop := len(r.entries) / 2
		for _, re := range r.entries[:drop] {
			r.bytes -= len(re.entry.Value)
		}
		// In place: readers copy what they return under the read lock.
		n := copy(r.entries, r.entries[drop:])
		clear(r.entries[n:])
		r.entries = r.entries[:n]
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
	r.entries, r.bytes = nil, 0
}

// Page returns, as copies, up to max held entries stored at or after seek
// (a stored log key or a prefix of one) with keys up to durable, and the
// seek of the next page when one may follow (nil when none does): a
// PageReader's answer. covered is false when entries before the held ones
// may be at or after seek: the caller reads the store instead.
func (r *Recent) Page(seek []byte, durable driver.LogKey, max int) (page []driver.Entry, next []byte, covered bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.entries) == 0 || bytes.Compare(seek, r.entries[0].key[:]) < 0 {
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
	for _, re := range r.entries[lo:] {
		if re.entry.Key > durable {
			return page, nil, true
		}
		if len(page) == max {
			return page, bytes.Clone(re.key[:]), true
		}
		e := re.entry
		e.Value = bytes.Clone(e.Value)
		page = append(page, e)
	}
	return page, nil, true
}
