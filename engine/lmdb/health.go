//go:build cgo && !nolmdb

package lmdb

import (
	"fmt"
	"time"

	"github.com/PowerDNS/lmdb-go/lmdb"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
	"github.com/tidemark-io/tidemark/engine/internal/space"
)

// LMDB writes a commit's pages with pwrite and then its meta page in
// place, so a full disk fails the commit (ENOSPC) before the meta page
// names any of it: the transaction is aborted, the map stays as the last
// commit left it, and the next commit that finds space succeeds. The
// engine needs no reopen. Small commits may still fit in pages the map
// freed while larger ones fail, so one success says little: Health
// reports the failure until the writer's probe (a file of probeSize
// written and synced in the data directory, then a commit) succeeds. The map
// filling (MDB_MAP_FULL) is no storage fault: the writer grows the map and
// retries (see grow). A failure LMDB itself calls fatal (MDB_PANIC, after
// a failed meta-page write) stays until the process restarts.

// probeEvery is how often the writer tries a commit of its own while a
// write failure stands.
const probeEvery = time.Second

// probeSize is the free space the probe asks for before Health clears.
const probeSize = 4 << 20

// metaProbe is the key the writer's probe commits write.
var metaProbe = []byte{kvlog.MetaPrefix, 'p', 'r', 'o', 'b', 'e'}

// failure is why the latest commit failed, and since when commits fail.
type failure struct {
	err   error
	since time.Time
}

// writeFailed records a failed commit (or sync) and returns its error,
// wrapping driver.ErrWriteFailed.
func (d *db) writeFailed(op string, err error) error {
	werr := fmt.Errorf("lmdb: %s: %w: %w", op, driver.ErrWriteFailed, err)
	f := &failure{err: werr, since: time.Now()}
	if prev := d.failure.Load(); prev != nil {
		f.since = prev.since
	} else {
		d.log.Error("storage write failed; commits fail until one succeeds again", "err", werr)
	}
	d.failure.Store(f)
	return werr
}

// probe writes and syncs probeSize in the data directory, then commits
// one small write of the engine's own, on the writer; only then does it
// clear the failure.
func (d *db) probe() {
	if err := space.Probe(d.opts.Dir, probeSize); err != nil {
		d.log.Debug("storage still refuses writes", "err", err)
		return
	}
	txn, err := d.env.BeginTxn(nil, 0)
	if err != nil {
		_ = d.writeFailed("probe", err) // recorded; the next probe tries again
		return
	}
	var stamp [8]byte
	now := uint64(time.Now().UnixNano())
	for i := range stamp {
		stamp[i] = byte(now >> (56 - 8*i))
	}
	if err := txn.Put(d.dbi, metaProbe, stamp[:], 0); err != nil {
		txn.Abort()
		if !lmdb.IsMapFull(err) {
			_ = d.writeFailed("probe", err) // recorded; the next probe tries again
		}
		return
	}
	if err := txn.Commit(); err != nil {
		_ = d.writeFailed("probe", err) // recorded; the next probe tries again
		return
	}
	if f := d.failure.Swap(nil); f != nil {
		d.log.Info("storage writes succeed again", "down", time.Since(f.since).Round(time.Millisecond).String())
	}
}

// Health reports whether the latest commit succeeded: nil, or an error
// wrapping driver.ErrWriteFailed that says since when and what to do.
func (d *db) Health() error {
	d.mu.RLock()
	closed := d.closed
	d.mu.RUnlock()
	if closed {
		return fmt.Errorf("lmdb: %w", driver.ErrClosed)
	}
	f := d.failure.Load()
	if f == nil {
		return nil
	}
	return fmt.Errorf("lmdb: commits failing since %s; free space in %s: %w",
		f.since.UTC().Format(time.RFC3339), d.opts.Dir, f.err)
}
