//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine"
)

func (d *db) Snapshot(ctx context.Context) (engine.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: snapshot: %w", err)
	}
	ix, _, closed := d.view.state()
	if closed || d.isClosed() {
		return nil, fmt.Errorf("jetstream: snapshot: %w", engine.ErrClosed)
	}
	return &snapshot{d: d, ix: ix}, nil
}

// snapshot is an immutable index root; it needs no lock, only to notice
// that it or its engine was closed.
type snapshot struct {
	d      *db
	ix     index
	closed atomic.Bool
}

func (s *snapshot) usable() error {
	if s.closed.Load() || s.d.isClosed() {
		return engine.ErrClosed
	}
	return nil
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := engine.ValidKey(key); err != nil {
		return nil, fmt.Errorf("jetstream: get: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: get: %w", err)
	}
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("jetstream: get: %w", err)
	}
	v, ok := s.ix.get(string(key))
	if !ok || v.deleted {
		return nil, fmt.Errorf("jetstream: get %q: %w", key, engine.ErrNotFound)
	}
	return append([]byte(nil), v.val...), nil
}

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (engine.Iterator, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("jetstream: iter: %w", err)
	}
	if err := s.usable(); err != nil {
		return nil, fmt.Errorf("jetstream: iter: %w", err)
	}
	return &iterator{s: s, cur: s.ix.seek(string(lower)), upper: upper}, nil
}

func (s *snapshot) Close() error {
	s.closed.Store(true)
	return nil
}

type iterator struct {
	s      *snapshot
	cur    *cursor
	upper  []byte
	n      *node
	err    error
	closed bool
}

func (it *iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.closed {
		it.err = fmt.Errorf("jetstream: iter: %w", engine.ErrClosed)
		return false
	}
	if err := it.s.usable(); err != nil {
		it.err = fmt.Errorf("jetstream: iter: %w", err)
		it.n = nil
		return false
	}
	for {
		n := it.cur.next()
		if n == nil || (it.upper != nil && n.key >= string(it.upper)) {
			it.n = nil
			it.cur.stack = nil
			return false
		}
		if !n.v.deleted {
			it.n = n
			return true
		}
	}
}

func (it *iterator) Key() []byte {
	if it.n == nil {
		return nil
	}
	return []byte(it.n.key)
}

func (it *iterator) Value() []byte {
	if it.n == nil {
		return nil
	}
	return it.n.v.val
}

func (it *iterator) Err() error { return it.err }

func (it *iterator) Close() error {
	it.closed = true
	it.n = nil
	return nil
}

// scanPage is how many log entries one batched direct get asks for.
const scanPage = 256

func (d *db) ScanLog(ctx context.Context, from engine.LogKey, exclusive bool, fn func(engine.Entry) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jetstream: scan log: %w", err)
	}
	if d.isClosed() {
		return fmt.Errorf("jetstream: scan log: %w", engine.ErrClosed)
	}
	if exclusive && from == ^engine.LogKey(0) {
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
		return fmt.Errorf("jetstream: scan log: %w: scan starts at %d, retained log starts at %d", engine.ErrLogTruncated, start, floor)
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
			return fmt.Errorf("jetstream: scan log: %w", engine.ErrClosed)
		}
		_, applied, _ := d.view.state()
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
func (d *db) scanPage(ctx context.Context, start, limit uint64, fn func(engine.Entry) bool) (next uint64, more, stopped bool, err error) {
	if start > limit {
		return start, false, false, nil
	}
	msgs, next, more, err := d.getPage(ctx, d.logSubj, start, limit)
	if err != nil {
		return start, false, false, fmt.Errorf("jetstream: scan log: %w", err)
	}
	// fn runs after the page is read, so it may call back into the engine.
	for _, m := range msgs {
		if !fn(engine.Entry{Key: engine.LogKey(m.Sequence), Count: 1, Value: m.Data}) {
			return next, false, true, nil
		}
	}
	return next, more && len(msgs) > 0, false, nil
}

// Truncate persists the new floor first and purges after, so a crash in
// between leaves entries that are hidden, never a gap that a scan from
// below the floor would not report.
func (d *db) Truncate(ctx context.Context, below engine.LogKey) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jetstream: truncate: %w", err)
	}
	if d.isClosed() {
		return fmt.Errorf("jetstream: truncate: %w", engine.ErrClosed)
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

func (d *db) LogStats(ctx context.Context) (engine.LogStats, error) {
	if err := ctx.Err(); err != nil {
		return engine.LogStats{}, fmt.Errorf("jetstream: log stats: %w", err)
	}
	if d.isClosed() {
		return engine.LogStats{}, fmt.Errorf("jetstream: log stats: %w", engine.ErrClosed)
	}
	if d.wal {
		return d.logStatsWAL(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	floor, _, _ := d.view.floorNow()
	st := engine.LogStats{Floor: engine.LogKey(floor)}
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
	st.First, st.Last = engine.LogKey(first.Sequence), engine.LogKey(last.Sequence)
	return st, nil
}
