//go:build !nobadger

package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// snapshot is a Badger read-only transaction. Every call holds the engine's
// read lock, so Close never pulls Badger from under it, and the snapshot's
// own lock, so Close (its own or the engine's) never discards the
// transaction under a read; after Close, calls return ErrClosed instead of
// reaching Badger.
type snapshot struct {
	d      *db
	mu     sync.RWMutex
	txn    *badger.Txn
	iters  map[*iterator]struct{}
	closed bool
}

func (d *db) Snapshot(ctx context.Context) (driver.Snapshot, error) {
	if !d.guard.Enter() {
		return nil, fmt.Errorf("badger: snapshot: %w", driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	s := &snapshot{d: d, txn: d.newTxn(false), iters: map[*iterator]struct{}{}}
	d.guard.Add(s)
	return s, nil
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	s.d.guard.RLock()
	defer s.d.guard.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("badger: get: %w", driver.ErrClosed)
	}
	item, err := s.txn.Get(kvlog.DataKey(nil, key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("badger: get %q: %w", key, driver.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: %w", key, err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("badger: get %q: %w", key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (driver.Iterator, error) {
	s.d.guard.RLock()
	defer s.d.guard.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("badger: iter: %w", driver.ErrClosed)
	}
	w := &iterator{s: s, lower: kvlog.DataKey(nil, lower), upper: kvlog.DataUpper(upper)}
	// Every key of the range starts with what its bounds share. Badger
	// skips deleted and older versions inside its iterator, up to the end
	// of the prefix it was given: with the data keyspace's one byte, a
	// range over a table with nothing live (an empty index) walked every
	// deleted key after it, tens of milliseconds behind a busy table.
	prefix := sharedPrefix(w.lower, w.upper)
	if len(prefix) == 0 { // no upper bound: the data keyspace
		prefix = w.lower[:1:1]
	}
	w.it = s.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	s.iters[w] = struct{}{}
	return w, nil
}

// Close closes the snapshot and any iterator still open on it.
func (s *snapshot) Close() error {
	s.d.guard.RLock()
	defer s.d.guard.RUnlock()
	s.d.guard.Remove(s)
	s.closeAll()
	return nil
}

// closeAll closes the iterators and discards the transaction; Badger
// requires iterators closed before the discard.
func (s *snapshot) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for w := range s.iters {
		w.closed = true
		w.it.Close()
	}
	s.iters = nil
	s.d.endTxn(s.txn)
}

// iterator walks the data keyspace of a snapshot. Next copies the key
// (without its prefix) and the value, so Key and Value stay readable after
// the engine closed.
type iterator struct {
	s            *snapshot
	it           *badger.Iterator
	lower, upper []byte
	started      bool
	done         bool
	closed       bool // under s.mu
	key, val     []byte
	err          error
}

func (w *iterator) Next() bool {
	w.s.d.guard.RLock()
	defer w.s.d.guard.RUnlock()
	w.s.mu.RLock()
	defer w.s.mu.RUnlock()
	if w.closed {
		if w.err == nil {
			w.err = fmt.Errorf("badger: iter: %w", driver.ErrClosed)
		}
		w.key, w.val = nil, nil
		return false
	}
	if w.done {
		return false
	}
	if !w.started {
		w.started = true
		w.it.Seek(w.lower)
	} else {
		w.it.Next()
	}
	if !w.it.Valid() {
		w.done = true
		return false
	}
	item := w.it.Item()
	k := item.Key()
	if bytes.Compare(k, w.upper) >= 0 {
		w.done = true
		return false
	}
	w.key = append(w.key[:0], k[1:]...)
	v, err := item.ValueCopy(w.val[:0])
	if err != nil {
		w.err = fmt.Errorf("badger: iter: value of %q: %w", w.key, err)
		w.done = true
		return false
	}
	w.val = v
	return true
}

func (w *iterator) Key() []byte   { return w.key }
func (w *iterator) Value() []byte { return w.val }
func (w *iterator) Err() error    { return w.err }

func (w *iterator) Close() error {
	w.s.d.guard.RLock()
	defer w.s.d.guard.RUnlock()
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	delete(w.s.iters, w)
	w.it.Close()
	return nil
}

// sharedPrefix is the longest prefix a and b have in common.
func sharedPrefix(a, b []byte) []byte {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n:n]
}
