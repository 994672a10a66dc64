//go:build !nobadger

package badger

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// versions issues Badger's versions itself (Badger's managed mode). In
// its own mode Badger tracks every transaction's read and commit
// timestamps through two watermark goroutines, several channel hand-offs
// per transaction, and a new transaction first waits for the watermark
// to pass the last commit; with one writer committing in order none of
// that is needed, and without it a commit costs less (one writer and one
// submitter without fsyncs: ~10% more commits/s; a submitter alternating
// with another: about twice as many).
//
// It keeps three invariants:
//   - commits are serialized and each gets the next version, so versions
//     land in order;
//   - read is the version of the last commit that completed: a transaction
//     opened at read sees every completed commit and no partial one;
//   - the discard version handed to Badger (versions at or below it may be
//     dropped by compaction, keeping the newest) never passes the read
//     version of a transaction still open.
type versions struct {
	commitMu sync.Mutex // held across a commit, so versions land in order
	next     uint64     // last version issued; under commitMu
	read     atomic.Uint64

	mu     sync.Mutex
	active map[uint64]int // read versions of open transactions, with counts
}

func (v *versions) init(top uint64) {
	v.next = top
	v.read.Store(top)
	v.active = map[uint64]int{}
}

// begin registers a transaction opened at the current read version.
func (v *versions) begin() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.read.Load()
	v.active[r]++
	return r
}

// end unregisters a transaction begin registered.
func (v *versions) end(r uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.active[r]--; v.active[r] <= 0 {
		delete(v.active, r)
	}
}

// discardable is the highest version Badger may drop older versions at:
// the oldest open transaction's, or the read version when none is open.
// A transaction opened later reads at a version at least as high.
func (v *versions) discardable() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := v.read.Load()
	for r := range v.active {
		m = min(m, r)
	}
	return m
}

// newTxn opens a Badger transaction at the read version; endTxn must
// close it.
func (d *db) newTxn(update bool) *badger.Txn {
	return d.bdb.NewTransactionAt(d.ver.begin(), update)
}

// endTxn discards a transaction newTxn opened.
func (d *db) endTxn(txn *badger.Txn) {
	txn.Discard()
	d.ver.end(txn.ReadTs())
}

// commitTxn commits txn at the next version and, when it succeeds, makes
// that the read version. A failed commit's version is never read at: the
// next commit takes a higher one.
func (d *db) commitTxn(txn *badger.Txn) error {
	d.ver.commitMu.Lock()
	defer d.ver.commitMu.Unlock()
	d.ver.next++
	t := d.ver.next
	if err := txn.CommitAt(t, nil); err != nil {
		if errors.Is(err, badger.ErrDBClosed) {
			return err
		}
		// Whatever else fails a commit is the store's writes failing.
		return d.space.Fail(fmt.Errorf("badger: %w: %w", driver.ErrWriteFailed, err))
	}
	d.ver.read.Store(t)
	return nil
}

// discardEvery is how often the engine lets Badger drop versions no open
// transaction can read; until it does, compaction keeps overwritten and
// deleted values.
const discardEvery = time.Second

// advanceDiscard hands Badger the discard version; the engine runs it
// every discardEvery.
func (d *db) advanceDiscard() { d.bdb.SetDiscardTs(d.ver.discardable()) }
