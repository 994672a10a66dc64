//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/pebble/localkv"
)

func (d *db) Snapshot(ctx context.Context) (driver.Snapshot, error) {
	if d.isClosed() {
		return nil, fmt.Errorf("jetstream: snapshot: %w", driver.ErrClosed)
	}
	idx := d.idx
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if idx.closed {
		return nil, fmt.Errorf("jetstream: snapshot: %w", driver.ErrClosed)
	}
	// The index commits only whole batches (view.publishLocked), so a
	// Pebble snapshot sees a prefix of the stream, never part of a batch.
	s := &snapshot{idx: idx, snap: idx.db.NewSnapshot(), iters: map[*iterator]struct{}{}}
	idx.snaps[s] = struct{}{}
	return s, nil
}

// snapshot is a Pebble snapshot of the index. Every call holds the index's
// read lock, so closing the engine never pulls the snapshot from under
// it; after either closed, calls return ErrClosed.
type snapshot struct {
	idx    *store
	snap   *localkv.Snapshot
	iters  map[*iterator]struct{} // under idx.mu
	closed bool                   // under idx.mu
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("jetstream: get: %w", driver.ErrClosed)
	}
	v, ok, err := lookup(s.snap, string(key))
	if err != nil {
		return nil, fmt.Errorf("jetstream: get: %w", err)
	}
	if !ok || v.deleted {
		return nil, fmt.Errorf("jetstream: get %q: %w", key, driver.ErrNotFound)
	}
	return v.val, nil
}

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (driver.Iterator, error) {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("jetstream: iter: %w", driver.ErrClosed)
	}
	hi := []byte{prefixRecord + 1}
	if upper != nil {
		hi = recordKey(string(upper))
	}
	it, err := s.snap.NewIter(recordKey(string(lower)), hi)
	if err != nil {
		return nil, fmt.Errorf("jetstream: iter: %w", err)
	}
	w := &iterator{s: s, it: it}
	s.iters[w] = struct{}{}
	return w, nil
}

func (s *snapshot) Close() error {
	s.idx.mu.Lock()
	defer s.idx.mu.Unlock()
	if !s.closed {
		delete(s.idx.snaps, s)
		s.closeLocked()
	}
	return nil
}

// closeLocked closes the snapshot and its iterators; idx.mu write-locked.
func (s *snapshot) closeLocked() {
	s.closed = true
	for it := range s.iters {
		it.closeLocked()
	}
	_ = s.snap.Close() // a snapshot of a store rebuilt at every open
}

// iterator walks the live records of a snapshot. Key and Value are
// copies, valid until the next call to Next, so they never point into
// the index after it closed.
type iterator struct {
	s        *snapshot
	it       *localkv.Iterator
	started  bool
	closed   bool // under s.idx.mu
	err      error
	key, val []byte
}

func (w *iterator) Next() bool {
	if w.err != nil {
		return false
	}
	w.s.idx.mu.RLock()
	defer w.s.idx.mu.RUnlock()
	w.key, w.val = w.key[:0], w.val[:0]
	if w.closed {
		w.err = fmt.Errorf("jetstream: iter: %w", driver.ErrClosed)
		w.key, w.val = nil, nil
		return false
	}
	for {
		var ok bool
		if !w.started {
			w.started = true
			ok = w.it.First()
		} else {
			ok = w.it.Next()
		}
		if !ok {
			if err := w.it.Error(); err != nil {
				w.err = fmt.Errorf("jetstream: iter: %w", err)
			}
			w.key, w.val = nil, nil
			return false
		}
		v, err := decodeVersion(w.it.Value())
		if err != nil {
			w.err = fmt.Errorf("jetstream: iter: %w: key %q", err, w.it.Key()[1:])
			w.key, w.val = nil, nil
			return false
		}
		if !v.deleted {
			w.key = append(w.key, w.it.Key()[1:]...)
			w.val = append(w.val, v.val...)
			return true
		}
	}
}

func (w *iterator) Key() []byte   { return w.key }
func (w *iterator) Value() []byte { return w.val }
func (w *iterator) Err() error    { return w.err }

func (w *iterator) Close() error {
	w.s.idx.mu.Lock()
	defer w.s.idx.mu.Unlock()
	if !w.closed {
		delete(w.s.iters, w)
		w.closeLocked()
	}
	w.key, w.val = nil, nil
	return nil
}

// closeLocked closes the Pebble iterator; idx.mu write-locked.
func (w *iterator) closeLocked() {
	w.closed = true
	_ = w.it.Close()
}

// scanPage is how many log entries one batched direct get asks for.
const scanPage = 256

func (d *db) ScanLog(ctx context.Context, from driver.LogKey, exclusive bool, fn func(driver.Entry) bool) error {
	if d.isClosed() {
		return fmt.Errorf("jetstream: scan log: %w", driver.ErrClosed)
	}
	if exclusive && from == ^driver.LogKey(0) {
		return nil
	}
	start := uint64(from)
	if exclusive {
		start++
	}
	if d.wal {
		return d.scanLogWAL(ctx, start, fn)
	}
	floor, _, logTop := d.view.floorNow()
	if floor > 0 && start < floor {
		return fmt.Errorf("jetstream: scan log: %w: scan starts at %d, retained log starts at %d", driver.ErrLogTruncated, start, floor)
	}
	start = max(start, 1)
	// A replica may answer a direct get before it applied what this
	// node's index has seen; keep reading until the scan reached the
	// highest log entry the index knew of when the scan began. And the
	// stream may hold entries the index has not applied yet: the scan
	// stops before them, so a reader that saw key K reads every commit up
	// to K from a snapshot taken after (Watch fires when they arrive).
	var retry time.Duration
	for {
		if d.isClosed() {
			return fmt.Errorf("jetstream: scan log: %w", driver.ErrClosed)
		}
		applied, _ := d.view.state()
		next, more, stopped, err := d.scanPage(ctx, start, applied, fn)
		if err != nil || stopped {
			return err
		}
		start = next
		if more {
			continue
		}
		if start > logTop || retry > time.Second {
			return nil
		}
		retry += 5 * time.Millisecond
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("jetstream: scan log: %w", ctx.Err())
		}
	}
}

// scanPage reads one page of log entries from start up to limit. It
// returns the next sequence to read, whether the server has more, and
// whether fn stopped.
func (d *db) scanPage(ctx context.Context, start, limit uint64, fn func(driver.Entry) bool) (next uint64, more, stopped bool, err error) {
	if start > limit {
		return start, false, false, nil
	}
	msgs, next, more, err := d.getPage(ctx, d.logSubj, start, limit)
	if err != nil {
		return start, false, false, fmt.Errorf("jetstream: scan log: %w", err)
	}
	// fn runs after the page is read, so it may call back into the engine.
	for _, m := range msgs {
		if !fn(driver.Entry{Key: driver.LogKey(m.Sequence), Count: 1, Value: m.Data}) {
			return next, false, true, nil
		}
	}
	return next, more && len(msgs) > 0, false, nil
}

// Truncate persists the new floor first and purges after, so a crash in
// between leaves entries that are hidden, never a gap that a scan from
// below the floor would not report.
func (d *db) Truncate(ctx context.Context, below driver.LogKey) error {
	if d.isClosed() {
		return fmt.Errorf("jetstream: truncate: %w", driver.ErrClosed)
	}
	if d.wal {
		return d.truncateWAL(ctx, below)
	}
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		floor, floorSeq, _ := d.view.floorNow()
		if uint64(below) <= floor {
			return nil
		}
		info, err := d.st.Info(rctx)
		if err != nil {
			return fmt.Errorf("jetstream: truncate: %w", err)
		}
		// Entries at or above the stream's next sequence do not exist
		// yet; a floor above it would hide entries not yet written.
		target := min(uint64(below), info.State.LastSeq+1)
		if target <= floor {
			return nil
		}
		_, err = d.js.Publish(rctx, d.floorSubj, []byte(strconv.FormatUint(target, 10)),
			jetstream.WithExpectLastSequencePerSubject(floorSeq))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeWrongLastSeq && attempt < 5 {
			// Another node moved the floor; see its value and decide again.
			if err := d.catchUp(rctx); err != nil {
				return fmt.Errorf("jetstream: truncate: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("jetstream: truncate: persist floor: %w", err)
		}
		d.view.raiseFloor(target)
		if err := d.st.Purge(rctx, jetstream.WithPurgeSubject(d.logSubj), jetstream.WithPurgeSequence(target)); err != nil {
			return fmt.Errorf("jetstream: truncate: purge log: %w", err)
		}
		if err := d.st.Purge(rctx, jetstream.WithPurgeSubject(d.checkSubj), jetstream.WithPurgeSequence(target)); err != nil {
			return fmt.Errorf("jetstream: truncate: purge check carriers: %w", err)
		}
		return nil
	}
}

func (d *db) LogStats(ctx context.Context) (driver.LogStats, error) {
	if d.isClosed() {
		return driver.LogStats{}, fmt.Errorf("jetstream: log stats: %w", driver.ErrClosed)
	}
	if d.wal {
		return d.logStatsWAL(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	floor, _, _ := d.view.floorNow()
	st := driver.LogStats{Floor: driver.LogKey(floor)}
	info, err := d.st.Info(rctx, jetstream.WithSubjectFilter(d.logSubj))
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: %w", err)
	}
	st.Entries = info.State.Subjects[d.logSubj]
	if st.Entries == 0 {
		return st, nil
	}
	if info.State.Msgs > 0 {
		st.Bytes = uint64(float64(info.State.Bytes) * float64(st.Entries) / float64(info.State.Msgs))
	}
	first, err := d.st.GetMsg(rctx, max(floor, 1), jetstream.WithGetMsgSubject(d.logSubj))
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: first entry: %w", err)
	}
	last, err := d.st.GetLastMsgForSubject(rctx, d.logSubj)
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: last entry: %w", err)
	}
	st.First, st.Last = driver.LogKey(first.Sequence), driver.LogKey(last.Sequence)
	return st, nil
}
