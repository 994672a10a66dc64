//go:build !nopebble

package pebble

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/space"
)

// A failed write leaves Pebble's WAL writer holding the error for good:
// every later commit into that DB fails or panics. So at the first failing
// write (see watchFS) the engine refuses commits with ErrWriteFailed and
// Health reports it; a recovery loop then waits until a probe file can be
// written and synced in the data directory, closes the failed Pebble DB
// and opens the directory again, which replays the WAL up to its last
// complete record, as after a crash. Commits that failed were never
// acknowledged; ones that completed are in the WAL and survive.

const (
	// minProbe is the least the recovery loop writes to decide that space
	// returned; it writes a memtable's worth when that is more, so the
	// reopened store can flush one (see probe).
	minProbe = 4 << 20
	// closeTimeout bounds the wait for a failed Pebble DB to close: a
	// panic inside its commit pipeline can leave the pipeline locked, and
	// then only a restart of the process frees the directory.
	closeTimeout = 10 * time.Second
	retryFirst   = 100 * time.Millisecond
	retryMax     = 2 * time.Second
)

// failure is why the engine refuses commits.
type failure struct {
	err   error
	since time.Time
}

// fatal is the panic value of slogLogger.Fatalf, so a recovered panic
// says it came from Pebble's fatal log.
type fatal string

// fail records the engine's first write failure and starts recovery. It
// takes no lock: it runs inside Pebble's I/O, which may happen under mu.
func (d *db) fail(err error) {
	f := &failure{err: err, since: time.Now()}
	if !d.failure.CompareAndSwap(nil, f) {
		return
	}
	d.log.Error("storage write failed; refusing commits until a write succeeds again", "err", err)
	d.recMu.Lock()
	defer d.recMu.Unlock()
	if d.recStopped {
		return
	}
	d.recWG.Add(1)
	go d.recoverLoop()
}

// failed returns the error commits are refused with, or nil.
func (d *db) failed() error {
	if f := d.failure.Load(); f != nil {
		return f.err
	}
	return nil
}

// Health reports whether the engine takes commits: nil, or an error
// wrapping driver.ErrWriteFailed that says since when and what to do.
func (d *db) Health() error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("pebble: %w", driver.ErrClosed)
	}
	f := d.failure.Load()
	if f == nil {
		return nil
	}
	if d.stuck.Load() {
		return fmt.Errorf("pebble: refusing commits since %s: %w; the failed store could not be closed: restart the process",
			f.since.UTC().Format(time.RFC3339), f.err)
	}
	return fmt.Errorf("pebble: refusing commits since %s until writes to %s succeed again (free space there): %w",
		f.since.UTC().Format(time.RFC3339), d.opts.Dir, f.err)
}

// guard runs one call into Pebble's commit pipeline. An error or a panic
// (Pebble panics on a WAL it can no longer write, and Fatalf panics) fails
// the engine and comes back wrapping driver.ErrWriteFailed.
func (d *db) guard(op string, call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble: %s: %w: %v", op, driver.ErrWriteFailed, r)
			d.fail(err)
		}
	}()
	if err = call(); err != nil {
		err = fmt.Errorf("pebble: %s: %w: %w", op, driver.ErrWriteFailed, err)
		d.fail(err)
	}
	return err
}

// recoverLoop waits until the data directory takes writes again, then
// reopens Pebble and lifts the failure.
func (d *db) recoverLoop() {
	defer d.recWG.Done()
	wait := retryFirst
	for {
		select {
		case <-d.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
		if err := d.probe(); err != nil {
			d.log.Debug("storage still refuses writes", "err", err)
			continue
		}
		done, err := d.reopen()
		if err != nil {
			d.log.Warn("reopening the store after a write failure failed; retrying", "err", err)
		}
		if done {
			return
		}
	}
}

// probe writes, syncs and removes a file in the data directory, through
// the same file system Pebble uses.
func (d *db) probe() error {
	create := func(name string) (space.File, error) { return d.fs.Create(name, "tidemark-probe") }
	name := filepath.Join(d.opts.Dir, space.ProbeName)
	return space.ProbeWith(create, d.fs.FS.Remove, name, max(minProbe, int(d.popts.MemTableSize)))
}

// reopen closes the failed Pebble DB and opens the directory again. done
// says the loop should end: recovered, closed, or stuck for good.
func (d *db) reopen() (done bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return true, nil
	}
	// Complete (with the failure) every commit the completer still holds,
	// so no handle waits on the DB about to close.
	if d.pending != nil {
		barrier := make(chan struct{})
		d.pending <- pendingCommit{barrier: barrier}
		<-barrier
	}
	// Likewise the SyncNone and SyncInterval committers waiting for their
	// write (the failed WAL writer has released them with its error, or
	// wrote them): none takes mu again, and none of them may still hold
	// a batch of the DB about to close.
	d.writing.Wait()
	d.readers.Lock()
	defer d.readers.Unlock()
	stale := fmt.Errorf("pebble: %w: the store was reopened after a write failure; read again", driver.ErrWriteFailed)
	d.readers.EndLocked(func(s *snapshot) {
		s.gone = stale
		_ = s.closeLocked() // closing: the reader is dropped either way
	})
	if d.pdb != nil {
		old := d.pdb
		d.pdb = nil
		if cerr := d.closeFailed(old); cerr != nil {
			if d.stuck.Load() {
				return true, cerr
			}
			d.log.Debug("closing the failed store", "err", cerr)
		}
	}
	d.checks.reset() // what the failed store applied may not have lasted
	d.recent.Reset()
	d.stats.Reset()
	pdb, err := d.openPebble()
	if err != nil {
		return false, err
	}
	d.pdb = pdb
	// The commits completed through the journal that the failed store's
	// tables lack are applied again (journal.go).
	if err := d.openJournal(nil); err != nil {
		d.pdb = nil
		_ = pdb.Close()
		return false, err
	}
	top, floor, last, err := d.recoverKeys()
	if err != nil {
		d.pdb = nil
		_ = pdb.Close()
		return false, err
	}
	d.floor = floor
	d.hlc.Observe(max(top, floor))
	if top > driver.LogKey(d.durable.Load()) {
		d.durable.Store(uint64(top))
	}
	d.seedRecent(top, last)
	d.stats.Start(top)
	since := d.failure.Load().since
	d.failure.Store(nil)
	d.log.Info("storage writes succeed again; store reopened", "down", time.Since(since).Round(time.Millisecond).String())
	d.notifier.Notify()
	return true, nil
}

// closeFailed closes a Pebble DB that failed a write, giving up after
// closeTimeout (the engine is then stuck).
func (d *db) closeFailed(old *pebble.DB) error {
	closed := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				closed <- fmt.Errorf("panic: %v", r)
			}
		}()
		closed <- old.Close()
	}()
	select {
	case err := <-closed:
		return err
	case <-time.After(closeTimeout):
		d.stuck.Store(true)
		d.log.Error("the failed store did not close; it stays unavailable until the process restarts", "dir", d.opts.Dir)
		return fmt.Errorf("pebble: close the failed store: %w: timed out after %v", driver.ErrWriteFailed, closeTimeout)
	}
}

// openPebble opens the data directory with the engine's options; a panic
// of Pebble's is an error here, the directory stays as a crash left it.
func (d *db) openPebble() (pdb *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble: open %s: %w: %v", d.opts.Dir, driver.ErrWriteFailed, r)
		}
	}()
	pdb, err = pebble.Open(d.opts.Dir, d.popts)
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", d.opts.Dir, err)
	}
	return pdb, nil
}

// down is the error of a read while no Pebble DB is open (between a
// failed reopen and the next); the readers guard is held exclusively.
func (d *db) downLocked(op string) error {
	if d.pdb == nil {
		return fmt.Errorf("pebble: %s: %w: the store is being reopened after a write failure", op, driver.ErrWriteFailed)
	}
	return nil
}
