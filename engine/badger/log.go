//go:build !nobadger

package badger

import (
	"bytes"
	"context"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

const (
	// scanPage is how many entries ScanLog reads per read transaction.
	scanPage = 256
	// truncateBatch is how many log keys one truncation transaction
	// deletes, keeping each far below Badger's transaction limits.
	truncateBatch = 4096
	// maxTruncate is the highest key Truncate accepts: truncating raises
	// the clock to below, and the clock must keep room to count on.
	maxTruncate = driver.LogKey(math.MaxUint64 >> 1)
)

var logPrefix = []byte{kvlog.LogPrefix}

func (d *db) ScanLog(ctx context.Context, from driver.LogKey, exclusive bool, fn func(driver.Entry) bool) error {
	if exclusive && from == ^driver.LogKey(0) {
		return d.alive("scan log")
	}
	// Each page is read in its own read transaction.
	return kvlog.ScanPages(ctx, "badger", from, exclusive, d.readLogPage, fn)
}

// alive reports ErrClosed once the engine closed.
func (d *db) alive(what string) error {
	if !d.guard.Enter() {
		return fmt.Errorf("badger: %s: %w", what, driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	return nil
}

// readLogPage reads up to scanPage entries from seek and returns them with
// the stored key to continue from (nil at the end of the log).
func (d *db) readLogPage(dst []driver.Entry, seek []byte, start driver.LogKey, checkFloor bool) ([]driver.Entry, []byte, error) {
	if !d.guard.Enter() {
		return nil, nil, fmt.Errorf("badger: scan log: %w", driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	if checkFloor {
		if err := kvlog.CheckFloor(start, driver.LogKey(d.floor.Load())); err != nil {
			return nil, nil, err
		}
	}
	if page, next, ok := d.recent.Page(dst, seek, ^driver.LogKey(0), scanPage); ok {
		return page, next, nil
	}
	txn := d.newTxn(false)
	defer d.endTxn(txn)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	defer it.Close()
	page := dst[:0]
	for it.Seek(seek); it.Valid(); it.Next() {
		item := it.Item()
		if len(page) == scanPage {
			return page, item.KeyCopy(nil), nil
		}
		var e driver.Entry
		var derr error
		if err := item.Value(func(v []byte) error {
			e, derr = kvlog.DecodeEntry(item.Key(), v)
			return nil
		}); err != nil {
			return nil, nil, fmt.Errorf("badger: scan log: %w", err)
		}
		if derr != nil {
			return nil, nil, derr
		}
		page = append(page, e)
	}
	return page, nil, nil
}

// Truncate raises the persisted floor to below, then deletes the log
// entries under it in bounded transactions. Raising the floor first means
// a crash part-way never exposes a log with a silent hole: scans below the
// floor fail with ErrLogTruncated, and the next open finishes the deletes.
func (d *db) Truncate(ctx context.Context, below driver.LogKey) error {
	if err := d.alive("truncate"); err != nil {
		return err
	}
	if below > maxTruncate {
		return fmt.Errorf("%w: truncate below %d: above the highest key the engine can issue", driver.ErrInvalidOption, below)
	}
	d.truncateMu.Lock()
	defer d.truncateMu.Unlock()
	if below <= driver.LogKey(d.floor.Load()) {
		return nil
	}
	// Later commits get keys at or above below, and the group being
	// committed now, which may hold keys under it, lands before the
	// deletes start.
	d.hlc.Observe(below - 1)
	d.groupMu.Lock()
	d.groupMu.Unlock() //nolint:staticcheck // a barrier: waits out the group in progress

	if err := d.setFloor(below); err != nil {
		return err
	}
	return d.deleteLogBelow(ctx, below)
}

func (d *db) setFloor(below driver.LogKey) error {
	if !d.guard.Enter() {
		return fmt.Errorf("badger: truncate: %w", driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	if err := d.admitTruncate(1); err != nil {
		return err
	}
	txn := d.newTxn(true)
	defer d.endTxn(txn)
	if err := txn.Set(kvlog.MetaFloor, kvlog.EncodeFloor(below)); err != nil {
		return fmt.Errorf("badger: truncate: %w", err)
	}
	if err := d.commitTxn(txn); err != nil {
		return fmt.Errorf("badger: truncate: %w", err)
	}
	d.floor.Store(uint64(below))
	return nil
}

// deleteLogBelow deletes every log entry with a key below below.
func (d *db) deleteLogBelow(ctx context.Context, below driver.LogKey) error {
	if below == 0 {
		return nil
	}
	upper := kvlog.LogSeek(below)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("badger: truncate: %w", err)
		}
		done, err := d.deleteLogBatch(upper)
		if err != nil || done {
			return err
		}
	}
}

// deleteLogBatch deletes up to truncateBatch log keys below upper and
// reports whether none are left.
func (d *db) deleteLogBatch(upper []byte) (bool, error) {
	if !d.guard.Enter() {
		return false, fmt.Errorf("badger: truncate: %w", driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	var keys [][]byte
	rtxn := d.newTxn(false)
	it := rtxn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	for it.Rewind(); it.Valid() && len(keys) < truncateBatch; it.Next() {
		k := it.Item().Key()
		if bytes.Compare(k, upper) >= 0 {
			break
		}
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	d.endTxn(rtxn)
	if len(keys) == 0 {
		return true, nil
	}
	if err := d.admitTruncate(len(keys)); err != nil {
		return false, err
	}
	txn := d.newTxn(true)
	defer d.endTxn(txn)
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return false, fmt.Errorf("badger: truncate: %w", err)
		}
	}
	if err := d.commitTxn(txn); err != nil {
		return false, fmt.Errorf("badger: truncate: %w", err)
	}
	return len(keys) < truncateBatch, nil
}

// LogStats returns the retained log's figures (engine/internal/logstats
// counts only what changed since the last call). Bytes is Badger's
// estimate of the stored keys and values, value-log values included.
func (d *db) LogStats(ctx context.Context) (driver.LogStats, error) {
	if !d.guard.Enter() {
		return driver.LogStats{}, fmt.Errorf("badger: log stats: %w", driver.ErrClosed)
	}
	defer d.guard.RUnlock()
	st, err := d.stats.Stats(ctx, statsSource{d})
	if err != nil {
		return st, fmt.Errorf("badger: log stats: %w", err)
	}
	return st, nil
}

// statsSource is the log as the stats counter reads it.
type statsSource struct{ d *db }

func (s statsSource) Floor(context.Context) (driver.LogKey, error) {
	return driver.LogKey(s.d.floor.Load()), nil
}

func (s statsSource) Scan(ctx context.Context, from driver.LogKey, fn func(driver.LogKey, uint64) bool) error {
	txn := s.d.newTxn(false)
	defer s.d.endTxn(txn)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix})
	defer it.Close()
	n := 0
	for it.Seek(kvlog.LogSeek(from)); it.Valid(); it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		item := it.Item()
		k, err := kvlog.KeyOf(item.Key())
		if err != nil {
			return err
		}
		if !fn(k, uint64(item.EstimatedSize())) {
			return nil
		}
	}
	return nil
}
