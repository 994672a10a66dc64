//go:build cgo && !nolmdb

package lmdb

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/PowerDNS/lmdb-go/lmdb"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

const (
	// scanPage bounds the log entries one ScanLog read transaction reads.
	scanPage = 256
	// iterPageMin and iterPageMax bound the keys an iterator reads per
	// visit to LMDB; pages start small for callers that read a few keys.
	iterPageMin = 16
	iterPageMax = 256
)

// snapshot is one LMDB read transaction. LMDB needs callers to serialize
// use of a read transaction (MDB_NOTLS lets it move between threads), so
// every use holds mu; every use also holds the engine's rw shared, so the
// map never moves or closes under it.
type snapshot struct {
	d    *db
	mu   sync.Mutex
	txn  *lmdb.Txn // nil once aborted
	dead atomic.Bool
}

// openSnapshot begins a read transaction, first waiting for a free reader
// slot while ctx allows.
func (d *db) openSnapshot(ctx context.Context) (*snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-d.slots:
	default:
		select {
		case <-d.slots:
		case <-d.done:
			return nil, driver.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !d.guard.Enter() {
		d.slots <- struct{}{}
		return nil, driver.ErrClosed
	}
	defer d.guard.RUnlock()
	txn, err := d.env.BeginTxn(nil, lmdb.Readonly)
	if err != nil {
		d.slots <- struct{}{}
		return nil, fmt.Errorf("begin read transaction: %w", err)
	}
	s := &snapshot{d: d, txn: txn}
	d.guard.Add(s)
	return s, nil
}

// do runs fn on the read transaction.
func (s *snapshot) do(fn func(txn *lmdb.Txn) error) error {
	s.d.guard.RLock()
	defer s.d.guard.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txn == nil {
		return driver.ErrClosed
	}
	return fn(s.txn)
}

func (s *snapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	var out []byte
	err := s.do(func(txn *lmdb.Txn) error {
		v, err := txn.Get(s.d.dbi, kvlog.DataKey(nil, key))
		if lmdb.IsNotFound(err) {
			return driver.ErrNotFound
		}
		out = v // a copy: the transaction does not read raw
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lmdb: get %q: %w", key, err)
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

func (s *snapshot) Iter(ctx context.Context, lower, upper []byte) (driver.Iterator, error) {
	if s.dead.Load() {
		return nil, fmt.Errorf("lmdb: iter: %w", driver.ErrClosed)
	}
	return &iterator{
		s:     s,
		seek:  kvlog.DataKey(nil, lower),
		upper: kvlog.DataUpper(upper),
		page:  iterPageMin,
	}, nil
}

func (s *snapshot) Close() error {
	s.d.guard.RLock()
	s.mu.Lock()
	s.abort()
	s.mu.Unlock()
	s.d.guard.RUnlock()
	s.d.guard.Remove(s)
	return nil
}

// abort ends the read transaction and frees its reader slot; s.mu is held,
// and rw at least shared.
func (s *snapshot) abort() {
	s.dead.Store(true)
	if s.txn == nil {
		return
	}
	s.txn.Abort()
	s.txn = nil
	s.d.slots <- struct{}{}
}

// abortLocked is abort for Close, which holds rw exclusively.
func (s *snapshot) abortLocked() {
	s.mu.Lock()
	s.abort()
	s.mu.Unlock()
}

type kv struct{ key, value []byte }

// iterator reads its range a page at a time and keeps no LMDB cursor
// between pages, because a cursor caches page addresses that a map resize
// would invalidate.
type iterator struct {
	s      *snapshot
	seek   []byte // stored key the next page starts at
	upper  []byte // stored exclusive upper bound
	page   int
	buf    []kv
	pos    int
	ended  bool
	closed bool
	err    error
}

func (it *iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.closed || it.s.dead.Load() {
		it.err = fmt.Errorf("lmdb: iter: %w", driver.ErrClosed)
		it.buf = nil
		return false
	}
	if it.pos+1 < len(it.buf) {
		it.pos++
		return true
	}
	if it.ended {
		it.buf, it.pos = nil, 0
		return false
	}
	if err := it.fill(); err != nil {
		it.err = fmt.Errorf("lmdb: iter: %w", err)
		it.buf = nil
		return false
	}
	return len(it.buf) > 0
}

// fill reads the next page into buf.
func (it *iterator) fill() error {
	it.buf, it.pos = it.buf[:0], 0
	err := it.s.do(func(txn *lmdb.Txn) error {
		cur, err := txn.OpenCursor(it.s.d.dbi)
		if err != nil {
			return err
		}
		defer cur.Close()
		k, v, err := cur.Get(it.seek, nil, lmdb.SetRange)
		for ; err == nil; k, v, err = cur.Get(nil, nil, lmdb.Next) {
			if bytes.Compare(k, it.upper) >= 0 {
				it.ended = true
				return nil
			}
			if len(it.buf) == it.page {
				return nil
			}
			it.buf = append(it.buf, kv{key: k, value: v})
		}
		if lmdb.IsNotFound(err) {
			it.ended = true
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if n := len(it.buf); n > 0 {
		// The smallest key above the last one read.
		it.seek = append(bytes.Clone(it.buf[n-1].key), 0)
	}
	it.page = min(2*it.page, iterPageMax)
	return nil
}

func (it *iterator) Key() []byte {
	if it.pos < len(it.buf) {
		return it.buf[it.pos].key[1:]
	}
	return nil
}

func (it *iterator) Value() []byte {
	if it.pos < len(it.buf) {
		return it.buf[it.pos].value
	}
	return nil
}

func (it *iterator) Err() error { return it.err }

func (it *iterator) Close() error {
	it.closed = true
	it.buf = nil
	return nil
}

func (d *db) Snapshot(ctx context.Context) (driver.Snapshot, error) {
	s, err := d.openSnapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("lmdb: snapshot: %w", err)
	}
	return s, nil
}

func (d *db) ScanLog(ctx context.Context, from driver.LogKey, exclusive bool, fn func(driver.Entry) bool) error {
	if exclusive && from == ^driver.LogKey(0) {
		if d.isClosed() {
			return fmt.Errorf("lmdb: scan log: %w", driver.ErrClosed)
		}
		return nil
	}
	// Each page is its own short read transaction, released before fn
	// runs, so fn may take as long as it likes and call back into the
	// engine without pinning old pages or a reader slot.
	return kvlog.ScanPages(ctx, "lmdb", from, exclusive, func(dst []driver.Entry, seek []byte, start driver.LogKey, first bool) ([]driver.Entry, []byte, error) {
		return d.readLogPage(ctx, dst, seek, start, first)
	}, fn)
}

// readLogPage reads up to scanPage entries from seek and returns the seek
// key of the next page (nil at the end of the log). The first page checks
// the floor in the same transaction it reads from.
func (d *db) readLogPage(ctx context.Context, dst []driver.Entry, seek []byte, start driver.LogKey, checkFloor bool) ([]driver.Entry, []byte, error) {
	s, err := d.openSnapshot(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("lmdb: scan log: %w", err)
	}
	defer s.Close()
	page := dst[:0]
	var next []byte
	err = s.do(func(txn *lmdb.Txn) error {
		if checkFloor {
			floor, err := readFloor(txn, d.dbi)
			if err != nil {
				return err
			}
			if err := kvlog.CheckFloor(start, floor); err != nil {
				return err
			}
		}
		txn.RawRead = true // entries are decoded into copies
		defer func() { txn.RawRead = false }()
		cur, err := txn.OpenCursor(d.dbi)
		if err != nil {
			return err
		}
		defer cur.Close()
		k, v, err := cur.Get(seek, nil, lmdb.SetRange)
		for ; err == nil && k[0] == kvlog.LogPrefix; k, v, err = cur.Get(nil, nil, lmdb.Next) {
			if len(page) == scanPage {
				next = bytes.Clone(k)
				return nil
			}
			e, err := kvlog.DecodeEntry(k, v)
			if err != nil {
				return err
			}
			page = append(page, e)
		}
		if err != nil && !lmdb.IsNotFound(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("lmdb: scan log: %w", err)
	}
	return page, next, nil
}

// LogStats returns the retained log's figures (engine/internal/logstats
// counts only what changed since the last call), read in one read
// transaction.
func (d *db) LogStats(ctx context.Context) (driver.LogStats, error) {
	// The counter must see each snapshot no older than the one before.
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	s, err := d.openSnapshot(ctx)
	if err != nil {
		return driver.LogStats{}, fmt.Errorf("lmdb: log stats: %w", err)
	}
	defer s.Close()
	st, err := d.stats.Stats(ctx, statsSource{s})
	if err != nil {
		return driver.LogStats{}, fmt.Errorf("lmdb: log stats: %w", err)
	}
	return st, nil
}

// statsSource is the log as the stats counter reads it, in one snapshot.
type statsSource struct{ s *snapshot }

func (src statsSource) Floor(context.Context) (floor driver.LogKey, err error) {
	err = src.s.do(func(txn *lmdb.Txn) error {
		floor, err = readFloor(txn, src.s.d.dbi)
		return err
	})
	return floor, err
}

// Scan reads a page at a time, so a long count never holds up a map
// resize.
func (src statsSource) Scan(ctx context.Context, from driver.LogKey, fn func(driver.LogKey, uint64) bool) error {
	seek := kvlog.LogSeek(from)
	for seek != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := src.s.do(func(txn *lmdb.Txn) error {
			txn.RawRead = true
			defer func() { txn.RawRead = false }()
			cur, err := txn.OpenCursor(src.s.d.dbi)
			if err != nil {
				return err
			}
			defer cur.Close()
			k, v, err := cur.Get(seek, nil, lmdb.SetRange)
			seek = nil
			for n := 0; err == nil && k[0] == kvlog.LogPrefix; k, v, err = cur.Get(nil, nil, lmdb.Next) {
				if n == 4096 {
					seek = bytes.Clone(k)
					return nil
				}
				key, kerr := kvlog.KeyOf(k)
				if kerr != nil {
					return kerr
				}
				if !fn(key, uint64(len(k)+len(v))) {
					return nil
				}
				n++
			}
			if err != nil && !lmdb.IsNotFound(err) {
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *db) isClosed() bool { return d.guard.Closed() }
