//go:build !nopebble

package pebble

import (
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Under SyncAlways the journal is the store's write-ahead log too, written
// (not mapped, see journal) and synced: the committer writes its record
// with one pwrite(2), applies the batch and queues the commit; whoever
// syncs next takes every commit queued by then, makes them durable with
// one fdatasync(2) of the journal, and completes them in order. So
// concurrent committers share a sync (group commit), as they shared
// Pebble's WAL syncs, and the sync is of blocks the file already has.
//
// Whoever syncs is a waiter that hurries its commit (driver.Handle.Hurry)
// when no sync is running, or else the journal's syncer goroutine. A
// client that sends one message at a time has its commit synced by the
// goroutine that will send the acknowledgement, with no hand-off to the
// syncer and back; through Pebble's WAL that took two (its WAL writer,
// then the engine's completer). The syncer syncs what no waiter did:
// commits queued while a sync ran, commits nobody hurries, and deferred
// commits (driver.Batch.Defer), which wait for a sync someone needs or
// for the defer window.
//
// Log entries become visible to scans once their commit completes (the
// durable key), as with Pebble's WAL; data keys when applied.

// journalQueue holds the commits waiting for a sync of the journal.
type journalQueue struct {
	// syncing is held by whoever syncs: the syncer, a hurrying waiter, a
	// reopen, the syncer's last sync at Close. Who lets it go with
	// commits queued kicks the syncer (see release), so a commit queued
	// during a sync is never left without one.
	syncing sync.Mutex
	closed  bool            // under syncing: Close ran the last sync
	spare   []pendingCommit // under syncing: the array of the group before

	mu     sync.Mutex
	queued []pendingCommit // in record order
	urgent int             // queued commits that are not deferred
	since  time.Time       // when the first deferred commit queued while none was urgent

	kick chan struct{} // one waiting: the syncer has commits to look at
}

func newJournalQueue() *journalQueue {
	return &journalQueue{kick: make(chan struct{}, 1)}
}

// wake kicks the syncer without waiting.
func (q *journalQueue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// release lets syncing go, then kicks the syncer if commits are queued
// that it has to sync, or, unless the syncer is the caller (syncer), to
// time: a kick it missed while the caller synced is not lost.
func (q *journalQueue) release(syncer bool) {
	q.syncing.Unlock()
	q.mu.Lock()
	more := q.urgent > 0 || (!syncer && len(q.queued) > 0)
	q.mu.Unlock()
	if more {
		q.wake()
	}
}

// awaitJournalSync queues a commit applied and journaled under
// SyncAlways (log key k for b's entries), with mu held so that commits
// queue in the order of their records, lets mu go and returns its
// handle.
func (d *db) awaitJournalSync(b *driver.Batch, k driver.LogKey) *driver.Handle {
	var res driver.Result
	if n := len(b.Log); n > 0 {
		res.Keys = make([]driver.LogKey, n)
		for i := range res.Keys {
			res.Keys[i] = k
		}
	}
	h, complete := driver.NewHurriedHandle(d.hurry)
	deferred := d.gate.Defer(b)
	q := d.jq
	q.mu.Lock()
	q.queued = append(q.queued, pendingCommit{complete: complete, res: res})
	kick := len(q.queued) == 1
	if deferred {
		if q.urgent == 0 && kick {
			q.since = time.Now()
		}
	} else {
		q.urgent++
		kick = kick || q.urgent == 1
	}
	q.mu.Unlock()
	d.mu.Unlock()
	if kick {
		q.wake()
	}
	return h
}

// hurryJournal is every journal handle's Hurry: it syncs the queued
// commits on the caller's goroutine, unless a sync is running (which
// kicks the syncer for what it leaves), or only deferred commits wait.
func (d *db) hurryJournal() {
	q := d.jq
	if !q.syncing.TryLock() {
		return
	}
	if !q.closed {
		d.syncQueued(false)
	}
	q.release(false)
}

// syncQueued takes the queued commits, syncs the journal and completes
// them, with syncing held; unless force, not while only deferred commits
// wait within their window. It reports how long the window of the
// deferred commits it left still runs (0: it left none).
func (d *db) syncQueued(force bool) time.Duration {
	q := d.jq
	q.mu.Lock()
	if len(q.queued) == 0 {
		q.mu.Unlock()
		return 0
	}
	if !force && q.urgent == 0 {
		if left := d.gate.Window() - time.Since(q.since); left > 0 {
			q.mu.Unlock()
			return left
		}
	}
	group := q.queued
	q.queued, q.urgent = q.spare[:0], 0
	q.mu.Unlock()
	d.finish(group, d.syncJournal())
	clear(group)
	q.spare = group[:0]
	return 0
}

// syncJournalLoop is the journal's syncer: it syncs the commits that no
// waiter hurried, each time it is kicked, and deferred ones once their
// window has passed; at Close, everything left.
func (d *db) syncJournalLoop() {
	defer d.completer.Done()
	q := d.jq
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-q.kick:
		case <-timer.C:
		case <-d.stop:
			q.syncing.Lock()
			d.syncQueued(true)
			q.closed = true
			q.syncing.Unlock()
			d.notifier.Notify()
			return
		}
		if !q.syncing.TryLock() {
			continue // its holder kicks again when it lets go
		}
		left := d.syncQueued(false)
		q.release(true)
		if left > 0 {
			timer.Reset(left)
		}
	}
}

// failQueued completes every queued commit with the engine's failure; a
// reopen calls it, with mu held, before it closes the failed store.
func (d *db) failQueued() {
	q := d.jq
	q.syncing.Lock()
	defer q.syncing.Unlock()
	d.syncQueued(true) // syncJournal reports the failure
}

// syncJournal makes every commit journaled so far durable, or reports why
// not. The caller holds the queue's syncing lock.
func (d *db) syncJournal() error {
	if err := d.failed(); err != nil {
		return err
	}
	return d.guard("sync the journal", d.jr.sync)
}
