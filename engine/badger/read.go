//go:build !nobadger

package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine"
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

func (d *db) Snapshot(ctx context.Context) (engine.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("badger: snapshot: %w", err)
	}
	d.rw.RLock()
	defer d.rw.RUnlock()
	if d.rclosed {
		return nil, fmt.Errorf("badger: snapshot: %w", engine.ErrClosed)
	}
	s := &snapshot{d: d, txn: d.newTxn(false), iters: map[*iterator]struct{}{}}
	d.regMu.Lock()
	d.readers[s] = struct{}{}
	d.regMu.Unlock()
	return s, nil
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := engine.ValidKey(key); err != nil {
		return nil, fmt.Errorf("badger: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("badger: get: %w", err)
	}
	s.d.rw.RLock()
	defer s.d.rw.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("badger: get: %w", engine.ErrClosed)
	}
	item, err := s.txn.Get(kvlog.DataKey(nil, key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("badger: get %q: %w", key, engine.ErrNotFound)
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

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (engine.Iterator, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("badger: iter: %w", err)
	}
	s.d.rw.RLock()
	defer s.d.rw.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("badger: iter: %w", engine.ErrClosed)
	}
	w := &iterator{
		s:     s,
		it:    s.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kvlog.DataPrefix}}),
		lower: kvlog.DataKey(nil, lower),
		upper: kvlog.DataUpper(upper),
	}
	s.iters[w] = struct{}{}
	return w, nil
}

// Close closes the snapshot and any iterator still open on it.
func (s *snapshot) Close() error {
	s.d.rw.RLock()
	defer s.d.rw.RUnlock()
	s.d.regMu.Lock()
	delete(s.d.readers, s)
	s.d.regMu.Unlock()
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
	w.s.d.rw.RLock()
	defer w.s.d.rw.RUnlock()
	w.s.mu.RLock()
	defer w.s.mu.RUnlock()
	if w.closed {
		if w.err == nil {
			w.err = fmt.Errorf("badger: iter: %w", engine.ErrClosed)
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
	w.s.d.rw.RLock()
	defer w.s.d.rw.RUnlock()
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
