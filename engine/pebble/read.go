//go:build !nopebble

package pebble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// snapshot wraps a Pebble snapshot. Every call holds the engine's read lock
// so Close never pulls the Pebble handle from under it; after Close, calls
// return ErrClosed instead of reaching Pebble.
type snapshot struct {
	d     *db
	snap  *pebble.Snapshot
	iters map[*iterator]struct{}
	// spare is the Pebble iterator of the last iterator closed, kept for
	// the next Iter: a view reads several ranges one after the other (a
	// returning session's three tables of rows), and moving an
	// iterator's bounds costs much less than making one over every level.
	spare  *pebble.Iterator
	closed bool
	// gone, when set, is what calls after a reopen closed the snapshot
	// return (see reopen), instead of ErrClosed.
	gone error
}

// closedErr is the error of a call on a closed snapshot.
func (s *snapshot) closedErr(op string) error {
	if s.gone != nil {
		return fmt.Errorf("pebble: %s: %w", op, s.gone)
	}
	return fmt.Errorf("pebble: %s: %w", op, driver.ErrClosed)
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	s.d.readers.RLock()
	defer s.d.readers.RUnlock()
	if s.closed {
		return nil, s.closedErr("get")
	}
	return getFrom(s.snap, key)
}

// Get reads key at the latest applied commit without a snapshot
// (driver.PointReader): a snapshot costs Pebble's database lock twice
// and the guard's exclusive hold, and a session setup reads keys one at a
// time.
func (d *db) Get(ctx context.Context, key []byte) ([]byte, error) {
	if !d.readers.Enter() {
		return nil, fmt.Errorf("pebble: get: %w", driver.ErrClosed)
	}
	defer d.readers.RUnlock()
	if err := d.downLocked("get"); err != nil {
		return nil, err
	}
	return getFrom(d.pdb, key)
}

// getFrom reads key's value from r (the database or a snapshot) as a
// copy the caller owns.
func getFrom(r pebble.Reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(kvlog.DataKey(nil, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, notFoundError(key)
	}
	if err != nil {
		return nil, fmt.Errorf("pebble: get %q: %w", key, err)
	}
	out := append([]byte(nil), v...)
	_ = closer.Close()
	return out, nil
}

// notFoundError is the error of a Get of an absent key. A miss is an
// ordinary answer (a client's first session, a topic with no retained
// message), so its message is formatted only when read.
type notFoundError string

func (e notFoundError) Error() string {
	return fmt.Sprintf("pebble: get %q: %v", string(e), driver.ErrNotFound)
}

// Unwrap returns driver.ErrNotFound.
func (e notFoundError) Unwrap() error { return driver.ErrNotFound }

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (driver.Iterator, error) {
	s.d.readers.Lock()
	defer s.d.readers.Unlock()
	if s.closed {
		return nil, s.closedErr("iter")
	}
	lo, hi := kvlog.DataKey(nil, lower), kvlog.DataUpper(upper)
	it := s.spare
	if it != nil {
		s.spare = nil
		it.SetBounds(lo, hi)
	} else {
		var err error
		if it, err = s.snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi}); err != nil {
			return nil, fmt.Errorf("pebble: iter: %w", err)
		}
	}
	w := &iterator{s: s, it: it}
	s.iters[w] = struct{}{}
	return w, nil
}

func (s *snapshot) Close() error {
	s.d.readers.Lock()
	defer s.d.readers.Unlock()
	if s.closed {
		return nil
	}
	s.d.readers.Remove(s)
	return s.closeLocked()
}

// closeLocked closes the snapshot and its iterators; the engine's readers
// guard is held exclusively.
func (s *snapshot) closeLocked() error {
	s.closed = true
	for it := range s.iters {
		_ = it.closeLocked() // the snapshot closes under it either way
	}
	if s.spare != nil {
		_ = s.spare.Close()
		s.spare = nil
	}
	return s.snap.Close()
}

type iterator struct {
	s       *snapshot
	it      *pebble.Iterator
	started bool
	closed  bool
	err     error
}

func (w *iterator) Next() bool {
	w.s.d.readers.RLock()
	defer w.s.d.readers.RUnlock()
	if w.closed {
		if w.err == nil {
			w.err = w.s.closedErr("iter")
		}
		return false
	}
	if !w.started {
		w.started = true
		return w.it.First()
	}
	return w.it.Next()
}

func (w *iterator) Key() []byte   { return w.it.Key()[1:] }
func (w *iterator) Value() []byte { return w.it.Value() }

func (w *iterator) Err() error {
	if w.err != nil {
		return w.err
	}
	w.s.d.readers.RLock()
	defer w.s.d.readers.RUnlock()
	if w.closed {
		if w.s.gone != nil {
			return w.s.closedErr("iter")
		}
		return nil
	}
	return w.it.Error()
}

func (w *iterator) Close() error {
	w.s.d.readers.Lock()
	defer w.s.d.readers.Unlock()
	if w.closed {
		return nil
	}
	delete(w.s.iters, w)
	if w.s.spare == nil && w.it.Error() == nil {
		w.closed = true
		w.s.spare, w.it = w.it, nil
		return nil
	}
	return w.closeLocked()
}

func (w *iterator) closeLocked() error {
	w.closed = true
	return w.it.Close()
}

// slogLogger routes Pebble's logs to slog; Pebble's info chatter goes to
// debug level.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) Infof(format string, args ...any) {
	l.l.Debug(fmt.Sprintf(format, args...))
}
func (l slogLogger) Errorf(format string, args ...any) {
	l.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on a state it cannot go on from, and must
// not return. Within a commit, a reopen or a sync of this engine the
// panic is recovered (see guard) and fails the engine into recovery,
// which reopens the directory; in Pebble's own background work it ends
// the process, as Pebble requires, after logging why.
func (l slogLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error("pebble fatal error", "err", msg)
	panic(fatal("pebble: fatal: " + msg))
}
