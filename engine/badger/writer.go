//go:build !nobadger

package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/group"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// pending is a submitted commit on its way through the writer. Submit
// prepares the stored keys and values so the writer only assigns the log
// key, checks and writes.
type pending struct {
	b        *driver.Batch
	complete func(driver.Result, error)
	data     [][]byte // stored key of each op
	checks   [][]byte // stored key of each check
	logVals  [][]byte // stored value of each log entry
	log      [][]byte // the batch's log entries (payloads)
	size     int64    // Badger's size estimate of the commit's entries
	bytes    int64    // keys and values, for the space guard (groupBytes)
	count    int64    // number of Badger entries
	deferred bool     // driver.Batch.Defer, and the gate let it wait

	res driver.Result
	err error // set when the commit fails on its own (conflict, too big)
}

func (d *db) Submit(ctx context.Context, b *driver.Batch) (*driver.Handle, error) {
	p := d.prepare(b)
	p.deferred = d.deferGate.Defer(b)
	h, complete := driver.NewHandle()
	p.complete = complete
	// A full queue makes Submit wait for room, or give up when ctx ends.
	if err := d.queue.Put(ctx, p); err != nil {
		return nil, fmt.Errorf("badger: submit: %w", err)
	}
	return h, nil
}

func (d *db) prepare(b *driver.Batch) *pending {
	p := &pending{b: b, data: make([][]byte, len(b.Ops)), checks: make([][]byte, len(b.Checks))}
	for i := range b.Ops {
		op := &b.Ops[i]
		p.data[i] = kvlog.DataKey(make([]byte, 0, len(op.Key)+1), op.Key)
		p.size += d.lim.entrySize(len(p.data[i]), len(op.Value))
		p.bytes += int64(len(p.data[i])+len(op.Value)) + commitOverhead
	}
	for i := range b.Checks {
		p.checks[i] = kvlog.DataKey(nil, b.Checks[i].Key)
	}
	if n := len(b.Log); n > 0 {
		p.log = b.Log
		p.logVals = make([][]byte, n)
		for i, e := range b.Log {
			p.logVals[i] = kvlog.LogValue(uint32(n), e)
			p.size += d.lim.entrySize(kvlog.LogKeyLen, len(p.logVals[i]))
			p.bytes += int64(kvlog.LogKeyLen+len(p.logVals[i])) + commitOverhead
		}
	}
	p.count = int64(len(b.Ops) + len(b.Log))
	return p
}

// newQueue returns the writer's queue: groups of up to queueLen commits,
// gathered under the badger rule, with deferred commits held open for
// company under SyncAlways.
func (d *db) newQueue() *group.Queue[*pending] {
	// Only a sync is worth waiting for: without one, a commit that comes
	// late costs a Badger transaction of its own (tens of microseconds),
	// about what the wait would have cost every group.
	syncs := d.opts.Sync == driver.SyncAlways
	return group.New(group.Options[*pending]{
		Limit:    queueLen,
		MaxGroup: queueLen,
		Rule: group.Rule{
			Wait: func(_ int, took time.Duration) time.Duration {
				if !syncs {
					return 0
				}
				return min(gatherWait, took/2)
			},
			Returned: true,
		},
		Linger:   d.deferGate.Window(),
		Deferred: func(p *pending) bool { return p.deferred },
	})
}

// gatherWait bounds how long the writer waits for stragglers: small next
// to a sync, which is what splitting them into a group of their own costs.
//
// The submitters whose commits the last group completed typically submit
// again at once; without waiting for them, the first few that arrive start
// a group of their own and the rest a second one, and the split persists,
// costing a sync per group. So when fewer commits came back since the last
// group completed than it held, the writer waits up to half the time that
// group took, at most gatherWait, for the rest (group.Rule.Returned).
const gatherWait = 250 * time.Microsecond

// writer takes every commit waiting and commits them as a group, until
// Close closes the queue and it is empty.
func (d *db) writer() {
	defer close(d.writerDone)
	buf := make([]*pending, 0, queueLen)
	all := func(bool, *pending) bool { return true }
	for {
		group := d.queue.Next(buf, all)
		if group == nil {
			return
		}
		start := time.Now()
		if err := d.space.Admit(groupBytes(group)); err != nil {
			d.fail(group, err)
			clear(group)
			continue
		}
		d.commitGroup(group)
		d.queue.Done(len(group), time.Since(start))
		clear(group)
	}
}

// commitGroup commits group in as few Badger transactions as its size
// allows, completing handles in order as each transaction becomes durable.
func (d *db) commitGroup(group []*pending) {
	d.groupMu.Lock()
	defer d.groupMu.Unlock()
	for len(group) > 0 {
		n, logged := d.commitSome(group)
		if logged {
			d.notifier.Notify()
		}
		group = group[n:]
	}
}

// commitSome packs a prefix of group (at least one commit) into one Badger
// transaction, commits it, completes the prefix's handles in order and
// returns the prefix length and whether it appended log entries.
func (d *db) commitSome(group []*pending) (n int, logged bool) {
	txn := d.newTxn(true)
	defer func() {
		if txn != nil {
			d.endTxn(txn)
		}
	}()
	size, count := int64(0), int64(1)
	var failed *pending // a commit that broke off the group with an error of its own
	for n < len(group) {
		p := group[n]
		if n > 0 && (size+p.size >= d.lim.size || count+p.count >= d.lim.count) {
			break
		}
		err := d.apply(txn, p)
		if err == nil {
			size, count = size+p.size, count+p.count
			n++
			continue
		}
		// p's writes are partly in txn and Badger cannot take them back:
		// rebuild the transaction from the commits before p.
		d.endTxn(txn)
		txn = nil
		if n == 0 {
			if errors.Is(err, badger.ErrTxnTooBig) {
				err = fmt.Errorf("badger: %w: the commit does not fit one Badger transaction (%w)", driver.ErrBatchTooLarge, err)
			} else {
				err = fmt.Errorf("badger: apply: %w", err)
			}
			p.complete(driver.Result{}, err)
			return 1, false
		}
		p.res, p.err = driver.Result{}, nil
		if !errors.Is(err, badger.ErrTxnTooBig) {
			failed = p
			failed.err = fmt.Errorf("badger: apply: %w", err)
		}
		// Otherwise the estimate let p in but Badger did not: p goes first
		// in the next transaction and is checked again there.
		txn = d.newTxn(true)
		if rerr := d.replay(txn, group[:n]); rerr != nil {
			d.fail(group[:n], rerr)
			return d.completeFailed(n, failed), false
		}
		break
	}
	err := d.commitTxn(txn)
	// Counted before any handle completes, so a submitter woken by this
	// transaction is seen by the gather rule as one that came back.
	d.txns.Add(1)
	d.queue.Advance()
	if err != nil {
		d.recent.Reset() // a commit Badger failed may have been written all the same
		d.stats.Reset()
		d.fail(group[:n], fmt.Errorf("badger: commit: %w", err))
		return d.completeFailed(n, failed), false
	}
	for _, p := range group[:n] {
		if p.err == nil && len(p.logVals) > 0 {
			d.recent.Add(p.res.Keys[0], p.log)
		}
	}
	for _, p := range group[:n] {
		if p.err != nil {
			p.complete(driver.Result{}, p.err)
			continue
		}
		p.complete(p.res, nil)
		logged = logged || len(p.res.Keys) > 0
	}
	return d.completeFailed(n, failed), logged
}

// completeFailed completes the commit that broke off a group with an error
// of its own, if any, after the n before it, and returns how many commits
// of the group are done.
func (d *db) completeFailed(n int, failed *pending) int {
	if failed == nil {
		return n
	}
	failed.complete(driver.Result{}, failed.err)
	return n + 1
}

// fail completes every commit of ps with err.
func (d *db) fail(ps []*pending, err error) {
	for _, p := range ps {
		p.complete(driver.Result{}, err)
	}
}

// apply evaluates p's checks against txn (which holds the earlier commits
// of the group) and, when they hold, assigns p's log key and writes p into
// txn. A failed check or read is p's own outcome, recorded in p.err with
// nothing written; the returned error means a write failed part-way.
func (d *db) apply(txn *badger.Txn, p *pending) error {
	for i := range p.b.Checks {
		if err := check(txn, p.checks[i], &p.b.Checks[i]); err != nil {
			p.err = err
			return nil //nolint:nilerr // p's own outcome, not a write failure
		}
	}
	if n := len(p.b.Log); n > 0 {
		k := d.hlc.Next()
		p.res.Keys = make([]driver.LogKey, n)
		for i := range p.res.Keys {
			p.res.Keys[i] = k
		}
	}
	return write(txn, p)
}

// replay writes again the commits of ps whose checks held, after a
// transaction had to be rebuilt; their checks and keys stand.
func (d *db) replay(txn *badger.Txn, ps []*pending) error {
	for _, p := range ps {
		if p.err != nil {
			continue
		}
		if err := write(txn, p); err != nil {
			return fmt.Errorf("badger: rebuild transaction: %w", err)
		}
	}
	return nil
}

func write(txn *badger.Txn, p *pending) error {
	for i := range p.b.Ops {
		op := &p.b.Ops[i]
		var err error
		if op.Kind == driver.OpPut {
			err = txn.Set(p.data[i], op.Value)
		} else {
			err = txn.Delete(p.data[i])
		}
		if err != nil {
			return err
		}
	}
	if len(p.logVals) > 0 {
		k := p.res.Keys[0]
		for i, v := range p.logVals {
			if err := txn.Set(kvlog.LogKey(k, uint32(i)), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// check evaluates one check against txn.
func check(txn *badger.Txn, key []byte, c *driver.Check) error {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		if c.Absent {
			return nil
		}
		return fmt.Errorf("badger: %w: key %q is absent", driver.ErrConflict, c.Key)
	}
	if err != nil {
		return fmt.Errorf("badger: check %q: %w", c.Key, err)
	}
	if c.Absent {
		return fmt.Errorf("badger: %w: key %q is present", driver.ErrConflict, c.Key)
	}
	equal := false
	if err := item.Value(func(v []byte) error {
		equal = bytes.Equal(v, c.Value)
		return nil
	}); err != nil {
		return fmt.Errorf("badger: check %q: %w", c.Key, err)
	}
	if !equal {
		return fmt.Errorf("badger: %w: key %q holds another value", driver.ErrConflict, c.Key)
	}
	return nil
}
