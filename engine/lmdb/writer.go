//go:build cgo && !nolmdb

package lmdb

import (
	"bytes"
	"fmt"
	"runtime"
	"time"

	"github.com/PowerDNS/lmdb-go/lmdb"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/group"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

const (
	// A group is bounded so one transaction's dirty pages stay far below
	// LMDB's per-transaction limit (about 128Ki pages) and one slow group
	// never delays the commits behind it for long.
	maxGroupCommits = 1024
	maxGroupBytes   = 64 << 20
	// jobOverhead approximates the per-entry page cost of a commit.
	jobOverhead = 64
	// truncChunk bounds the log keys one truncation transaction removes.
	truncChunk = 4096
	// maxGrowths bounds how often one group may grow the map before it
	// fails: doubling 40 times is past any address space.
	maxGrowths = 40
)

type op struct {
	del        bool
	key, value []byte
}

type check struct {
	key, value []byte
	absent     bool
}

// job is one unit of work for the writer: a commit, or one bounded round
// of a truncation.
type job struct {
	ops      []op
	checks   []check
	log      [][]byte
	size     int
	deferred bool // driver.Batch.Defer, and the gate let it wait
	complete func(driver.Result, error)

	trunc bool
	below driver.LogKey
	tdone chan struct{} // closed when the round finished
	more  bool          // the round stopped at truncChunk keys

	// Outcome of the latest attempt.
	res driver.Result
	err error
	// failed marks an error found while the job was half applied: the
	// group is retried without it.
	failed bool
}

// newCommitJob converts b to stored keys off the writer's thread, so the
// one writer spends its time in LMDB.
func newCommitJob(b *driver.Batch) *job {
	n := 0
	for i := range b.Ops {
		n += 1 + len(b.Ops[i].Key)
	}
	for i := range b.Checks {
		n += 1 + len(b.Checks[i].Key)
	}
	buf := make([]byte, 0, n)
	stored := func(k []byte) []byte {
		start := len(buf)
		buf = append(buf, kvlog.DataPrefix)
		buf = append(buf, k...)
		return buf[start:len(buf):len(buf)]
	}
	j := &job{ops: make([]op, len(b.Ops)), checks: make([]check, len(b.Checks)), log: b.Log}
	for i := range b.Ops {
		o := &b.Ops[i]
		j.ops[i] = op{del: o.Kind == driver.OpDelete, key: stored(o.Key), value: o.Value}
		j.size += jobOverhead + len(o.Key) + len(o.Value)
	}
	for i := range b.Checks {
		c := &b.Checks[i]
		j.checks[i] = check{key: stored(c.Key), value: c.Value, absent: c.Absent}
	}
	for _, e := range b.Log {
		j.size += jobOverhead + len(e)
	}
	return j
}

// writer owns every write transaction. LMDB ties a write transaction to
// the OS thread that began it, so the goroutine is locked to its thread
// while a transaction is open: for its whole life under SyncAlways, else
// one group at a time.
//
// Why it differs: a goroutine locked to a thread costs an OS thread switch
// each time it blocks and wakes. Without fsyncs a transaction takes tens
// of microseconds and those switches were most of a commit's cost
// (measured, QoS 2 window 1 over MQTT: twice the messages per second when
// unlocked between groups). Under SyncAlways a transaction waits about
// 0.4 ms in fsyncs, and keeping the thread measured faster (5-15% at the
// same point, in interleaved runs).
func (d *db) writer() {
	pinned := d.opts.Sync == driver.SyncAlways
	if pinned {
		runtime.LockOSThread()
	}
	defer close(d.writerDone)
	var tick <-chan time.Time
	if d.opts.Sync == driver.SyncInterval {
		t := time.NewTicker(d.opts.Interval())
		defer t.Stop()
		tick = t.C
	}
	// While a write failure stands, the writer probes for space on its
	// own, so Health clears without waiting for a client's commit.
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	buf := make([]*job, 0, maxGroupCommits)
	size := 0 // bytes of the group being taken
	fits := func(first bool, j *job) bool {
		if first {
			size = 0
		} else if size+j.size > maxGroupBytes {
			return false
		}
		size += j.size
		return true
	}
	for {
		// Everything that queued up while the previous group synced joins
		// this one: that is the group commit. A group of deferred commits
		// waits for one that is not (see newQueue).
		group, open := d.queue.TryNext(buf, fits)
		if !open {
			if d.opts.Sync == driver.SyncInterval {
				d.sync()
			}
			return
		}
		if group == nil {
			select {
			case <-probe.C:
				if d.failure.Load() != nil {
					d.probe()
				}
			case <-tick:
				d.sync()
			case <-d.queue.Ready():
			}
			continue
		}
		if !pinned {
			runtime.LockOSThread()
		}
		for rest := group; len(rest) > 0; {
			rest = rest[d.commitGroup(rest):]
		}
		if !pinned {
			runtime.UnlockOSThread()
		}
		clear(group)
	}
}

// newQueue returns the writer's queue: groups of up to maxGroupCommits
// commits and maxGroupBytes, no gather wait (a commit's transaction is
// short next to a sync, and the writer takes everything that queued
// during the last one), and under SyncAlways deferred commits held open
// for company.
func (d *db) newQueue() *group.Queue[*job] {
	return group.New(group.Options[*job]{
		Limit:    queueLen,
		MaxGroup: maxGroupCommits,
		Linger:   d.gate.Window(),
		Deferred: func(j *job) bool { return j.deferred },
	})
}

func (d *db) sync() {
	if err := d.env.Sync(true); err != nil {
		d.log.Error("periodic sync failed", "err", d.writeFailed("sync", err))
	}
}

// attempt is what one try at a group's transaction asks for next.
type attempt uint8

const (
	attemptDone   attempt = iota // committed, or failed for good
	attemptRetry                 // a job failed half applied; retry without it
	attemptShrink                // the transaction filled; retry a prefix
	attemptGrow                  // the map filled; grow it and retry
)

// commitGroup applies a prefix of group (all of it unless it does not fit
// one transaction) in one write transaction, completes those jobs in order
// and returns how many it took.
func (d *db) commitGroup(group []*job) int {
	n, growths := len(group), 0
	for {
		next, cut, err := d.tryGroup(group[:n])
		switch next {
		case attemptRetry:
			continue
		case attemptShrink:
			n = cut
			continue
		case attemptGrow:
			growths++
			if growths > maxGrowths {
				err = fmt.Errorf("lmdb: map still full after %d growths: %w", maxGrowths, err)
			} else if err = d.grow(groupSize(group[:n])); err == nil {
				continue
			}
		}
		d.finish(group[:n], err)
		return n
	}
}

// tryGroup runs group in one write transaction. It returns attemptDone
// with the error that fails every job (nil when the transaction
// committed), or what to do next; cut is the prefix to keep on
// attemptShrink.
func (d *db) tryGroup(group []*job) (next attempt, cut int, err error) {
	txn, err := d.env.BeginTxn(nil, 0)
	if err != nil {
		return attemptDone, 0, d.writeFailed("begin write transaction", err)
	}
	// Values read for checks are only compared, never kept.
	txn.RawRead = true
	for i, j := range group {
		if j.failed {
			continue
		}
		j.res, j.err, j.more = driver.Result{}, nil, false
		err := d.apply(txn, j)
		switch {
		case err == nil:
		case isConflict(err):
			// Checks run before any write, so the job left nothing behind.
			j.err = err
		case lmdb.IsMapFull(err):
			txn.Abort()
			return attemptGrow, 0, err
		case lmdb.IsErrno(err, lmdb.TxnFull) && i > 0:
			txn.Abort()
			return attemptShrink, i, nil
		default:
			txn.Abort()
			j.err, j.failed = fmt.Errorf("lmdb: apply: %w", err), true
			return attemptRetry, 0, nil
		}
	}
	if err := txn.Commit(); err != nil {
		if lmdb.IsMapFull(err) {
			return attemptGrow, 0, err // aborted: nothing applied
		}
		d.stats.AppendUnknown()
		return attemptDone, 0, d.writeFailed("commit", err)
	}
	// Counted as committed: a retention pass's LogStats then reads none
	// of the log written since the last.
	for _, j := range group {
		if j.failed || j.err != nil {
			continue
		}
		for i, k := range j.res.Keys {
			d.stats.Appended(k, 1, uint64(kvlog.LogKeyLen+kvlog.LogValueLen(1, j.log[i])))
		}
	}
	return attemptDone, 0, nil
}

// apply writes one job into txn. A commit's checks are all evaluated
// before its first write, so a conflict leaves txn as it was.
func (d *db) apply(txn *lmdb.Txn, j *job) error {
	if j.trunc {
		return d.applyTruncate(txn, j)
	}
	for i := range j.checks {
		c := &j.checks[i]
		v, err := txn.Get(d.dbi, c.key)
		switch {
		case lmdb.IsNotFound(err):
			if !c.absent {
				return fmt.Errorf("lmdb: %w: key %q is absent", driver.ErrConflict, c.key[1:])
			}
		case err != nil:
			return err
		case c.absent:
			return fmt.Errorf("lmdb: %w: key %q is present", driver.ErrConflict, c.key[1:])
		case !bytes.Equal(v, c.value):
			return fmt.Errorf("lmdb: %w: key %q holds another value", driver.ErrConflict, c.key[1:])
		}
	}
	for i := range j.ops {
		o := &j.ops[i]
		if o.del {
			if err := txn.Del(d.dbi, o.key, nil); err != nil && !lmdb.IsNotFound(err) {
				return err
			}
		} else if err := txn.Put(d.dbi, o.key, o.value, 0); err != nil {
			return err
		}
	}
	if n := len(j.log); n > 0 {
		first := d.hlc.NextN(n)
		keys := make([]driver.LogKey, n)
		for i, e := range j.log {
			keys[i] = first + driver.LogKey(i)
			if err := txn.Put(d.dbi, kvlog.LogKey(keys[i], 0), kvlog.LogValue(1, e), 0); err != nil {
				return err
			}
		}
		j.res.Keys = keys
	}
	return nil
}

// applyTruncate raises the floor to j.below (if higher) and removes up to
// truncChunk log keys below the floor. The floor goes first, so a
// truncation cut short hides what it left; Open finishes it.
func (d *db) applyTruncate(txn *lmdb.Txn, j *job) error {
	floor, err := readFloor(txn, d.dbi)
	if err != nil {
		return err
	}
	below := max(j.below, floor)
	if below == 0 {
		return nil
	}
	cur, err := txn.OpenCursor(d.dbi)
	if err != nil {
		return err
	}
	limit := kvlog.LogSeek(below)
	var keys [][]byte
	k, _, err := cur.Get(kvlog.LogSeek(0), nil, lmdb.SetRange)
	for err == nil && bytes.Compare(k, limit) < 0 {
		if len(keys) == truncChunk {
			j.more = true
			break
		}
		keys = append(keys, bytes.Clone(k))
		k, _, err = cur.Get(nil, nil, lmdb.Next)
	}
	cur.Close()
	if err != nil && !lmdb.IsNotFound(err) {
		return err
	}
	if j.below > floor {
		if err := txn.Put(d.dbi, kvlog.MetaFloor, kvlog.EncodeFloor(j.below), 0); err != nil {
			return err
		}
	}
	for _, k := range keys {
		if err := txn.Del(d.dbi, k, nil); err != nil {
			return err
		}
	}
	return nil
}

// finish completes jobs in order: with groupErr when the transaction
// failed, else with each job's own outcome.
func (d *db) finish(jobs []*job, groupErr error) {
	logged := false
	for _, j := range jobs {
		err := j.err
		if groupErr != nil && !j.failed {
			err = groupErr
		}
		if j.trunc {
			j.err = err
			close(j.tdone)
			continue
		}
		if err != nil {
			j.complete(driver.Result{}, err)
			continue
		}
		logged = logged || len(j.res.Keys) > 0
		j.complete(j.res, nil)
	}
	if logged {
		d.notifier.Notify()
	}
}

// grow enlarges the map to at least double, and enough for need more
// bytes. It runs on the writer between transactions, holding rw so no read
// touches the map while LMDB moves it.
func (d *db) grow(need int) error {
	info, err := d.env.Info()
	if err != nil {
		return fmt.Errorf("lmdb: grow map: %w", err)
	}
	const mib = 1 << 20
	size := max(2*info.MapSize, info.MapSize+2*int64(need))
	size = (size + mib - 1) / mib * mib
	d.guard.Lock()
	err = d.env.SetMapSize(size)
	d.guard.Unlock()
	if err != nil {
		return fmt.Errorf("lmdb: grow map from %d to %d bytes: %w", info.MapSize, size, err)
	}
	d.log.Info("grew the LMDB map", "from_bytes", info.MapSize, "to_bytes", size)
	return nil
}

func groupSize(group []*job) int {
	n := 0
	for _, j := range group {
		n += j.size
	}
	return n
}
