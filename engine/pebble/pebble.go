//go:build !nopebble

package pebble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
	"github.com/tidemark-io/tidemark/engine/internal/logstats"
	"github.com/tidemark-io/tidemark/engine/internal/snapguard"
	"github.com/tidemark-io/tidemark/internal/hlc"
)

func init() {
	driver.Register(Name, driver.Driver{
		Open: open,
		Params: []driver.Param{
			{Name: "cache_mb", Default: "64", Doc: "block cache size in MiB, beside the memtables (Pebble counts them against its cache, so the cache is made this much larger than they can take)"},
			{Name: "memtable_mb", Default: "64", Doc: "memtable size in MiB"},
			{Name: "journal_kb", Default: "16384", Doc: "size in KiB (128 or more; 0: none) of the commit journal that is the write-ahead log of sync modes none and interval (Linux), a file mapped into memory: a commit completes without a system call or a wait for Pebble's WAL writer; 0 has those modes write Pebble's WAL and wait for its writer"},
		},
		Doc: "embedded LSM (cockroachdb/pebble v2); one log key per transaction; group commit through Pebble's commit pipeline",
	})
}

// memtablesMax is the most memtables Pebble keeps (the one written and
// those waiting to be flushed) before it stops writes: its default,
// stated because the block cache is sized by it (see cacheBytes).
const memtablesMax = 2

// defaultJournalKB is the commit journal's size by default: two halves of
// 8 MiB, each a flush of the memtables when it fills. Its pages count in
// the process's resident memory once written.
const defaultJournalKB = 16 << 10

// journalL0Compaction is the L0 read amplification at which Pebble
// compacts L0 when the journal is the WAL (Pebble's default: 4). With
// 16, qos1-w16-x50 ran at 155,458, 133,793 and 164,099 msgs/s against
// 148,950, 116,416 and 128,569 (delivery p99 32-55 ms against 36-251),
// and qos1-w256 at 227,921 and 229,538 against 184,111 and 189,386;
// QoS 2 points moved within the noise.
const journalL0Compaction = 16

// cacheBytes is the size of a block cache that keeps cacheMB MiB for
// blocks beside memtablesMax memtables of memMB MiB, which Pebble
// reserves in the same cache.
func cacheBytes(cacheMB, memMB int) int64 {
	return int64(cacheMB+memtablesMax*memMB) << 20
}

// pendingCommit is an applied commit waiting for its WAL sync.
type pendingCommit struct {
	batch    *pebble.Batch // nil for a deferred commit, applied without sync
	complete func(driver.Result, error)
	res      driver.Result
	// barrier, when set, marks no commit: the completer closes it once
	// every commit queued before it completed (see reopen).
	barrier chan struct{}
}

// db is the engine. mu orders commits: a key is assigned and its batch
// applied under mu, so log-key order is Pebble's sequence order. readers guards
// the Pebble handle against reads racing Close.
type db struct {
	lock  *dirlock.Lock // the data directory, held while open
	pdb   *pebble.DB    // under mu and readers; nil between a failed reopen and the next
	popts *pebble.Options
	fs    *watchFS
	opts  driver.Options
	hlc   *hlc.Clock
	cache *pebble.Cache
	log   *slog.Logger

	mu      sync.Mutex
	closed  bool
	checks  checkCache         // under mu
	recent  kvlog.Recent       // added to under mu
	pending chan pendingCommit // SyncAlways only; completed in order
	// writing counts the commits of SyncNone and SyncInterval applied and
	// waiting for their write (see Submit); Add under mu while open.
	writing sync.WaitGroup
	// jr is the commit journal of SyncNone and SyncInterval (journal.go),
	// under mu; nil where the commits wait for Pebble's WAL writer.
	// Pebble runs without its WAL (popts.DisableWAL) while it is set.
	jr     *journal
	jrSize int
	// gate picks the deferred commits (Batch.Defer) that wait for a
	// later sync.
	gate *deferral.Gate

	// readers keeps the Pebble handle open (and in place: see reopen)
	// under every read and ends the open snapshots on Close
	// (engine/internal/snapguard); held exclusively, it also guards floor
	// and the snapshots' iterator sets.
	readers *snapguard.Guard[*snapshot]
	floor   driver.LogKey // under readers
	// stats keeps the log's figures between LogStats calls.
	stats logstats.Counter

	// durable is the highest log key whose commit is durable; scans stop
	// there, so no reader sees an entry a crash could still take back.
	durable atomic.Uint64

	notifier  driver.Notifier
	completer sync.WaitGroup
	stop      chan struct{}

	// failure, when set, is the write failure commits are refused with
	// until recovery reopens the store (recover.go); stuck says it never
	// will.
	failure    atomic.Pointer[failure]
	stuck      atomic.Bool
	recMu      sync.Mutex
	recStopped bool // under recMu: Close began, start no recovery
	recWG      sync.WaitGroup
}

func open(ctx context.Context, opts driver.Options) (driver.Engine, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: pebble needs a data directory (Options.Dir)", driver.ErrInvalidOption)
	}
	cacheMB, err := driver.IntParam(opts, Name, "cache_mb", 64, 1, 1<<20)
	if err != nil {
		return nil, err
	}
	memMB, err := driver.IntParam(opts, Name, "memtable_mb", 64, 1, 4096)
	if err != nil {
		return nil, err
	}
	journalKB, err := driver.IntParam(opts, Name, "journal_kb", defaultJournalKB, 0, 1<<20)
	if err != nil {
		return nil, err
	}
	if journalKB > 0 && journalKB < 128 {
		return nil, fmt.Errorf("%w: pebble: journal_kb=%d: a journal takes 128 KiB or more (0: none)", driver.ErrInvalidOption, journalKB)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble: create %s: %w", opts.Dir, err)
	}
	// Pebble reserves every memtable's size in the block cache it is
	// given. A cache no larger than the memtables (as 64 MiB of each
	// were) caches no block once two memtables have filled: every check
	// of a commit and every read then went to the file for its filter and
	// index blocks. The cache is sized so that cacheMB stay for blocks
	// when the memtables hold all Pebble lets them.
	cache := pebble.NewCache(cacheBytes(cacheMB, memMB))
	d := &db{
		opts:    opts,
		cache:   cache,
		log:     opts.Log().With("engine", Name),
		readers: snapguard.New[*snapshot](),
		stop:    make(chan struct{}),
		gate:    deferral.NewGate(opts.Deferral()),
		jrSize:  journalKB << 10,
	}
	d.fs = newWatchFS(func(err error) {
		d.fail(fmt.Errorf("pebble: %w: %w", driver.ErrWriteFailed, err))
	})
	d.fs.walNoSync = opts.Sync != driver.SyncAlways
	popts := &pebble.Options{
		FS:                          d.fs,
		Cache:                       cache,
		MemTableSize:                uint64(memMB) << 20,
		MemTableStopWritesThreshold: memtablesMax,
		Logger:                      slogLogger{opts.Log().With("engine", Name)},
	}
	// Commit checks are point reads, often of keys that are absent (a free
	// staging slot): without filters each one searches every level.
	popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	lock, err := dirlock.Take(Name, opts.Dir)
	if err != nil {
		cache.Unref()
		return nil, err
	}
	// Read before the journal is mapped, which may resize it; empty, not
	// nil, where there is none, so that openJournal does not read the
	// file just made.
	journaled, err := readJournal(opts.Dir)
	if err != nil {
		cache.Unref()
		lock.Release()
		return nil, err
	}
	if journaled == nil {
		journaled = []byte{}
	}
	if opts.Sync != driver.SyncAlways && d.jrSize > 0 {
		d.jr, err = openJournal(opts.Dir, d.jrSize)
		switch {
		case errors.Is(err, errJournalNoSpace):
			// Pebble's WAL needs less at once; the store stays usable.
			d.log.Warn("no space for the commit journal; commits wait for Pebble's WAL writer instead", "journal_kb", journalKB, "err", err)
		case err != nil:
			cache.Unref()
			lock.Release()
			return nil, err
		}
		// The journal is the WAL (journal.go).
		popts.DisableWAL = d.jr != nil
		if d.jr != nil {
			// Each half of the journal is a flush, an L0 table, far more
			// often than memtables fill: at Pebble's default of 4, L0
			// compactions rewrote the level below every 32 MiB of
			// commits by default, and took a third of the broker's CPU
			// under 50 publishing connections.
			popts.L0CompactionThreshold = journalL0Compaction
			popts.L0StopWritesThreshold = 3 * journalL0Compaction
		}
	}
	d.popts = popts
	pdb, err := pebble.Open(opts.Dir, popts)
	if err != nil {
		d.closeJournal()
		cache.Unref()
		lock.Release()
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("pebble: open %s: %w: pebble's lock is held by another process: %w", opts.Dir, driver.ErrInUse, err)
		}
		return nil, fmt.Errorf("pebble: open %s: %w", opts.Dir, err)
	}
	d.lock, d.pdb = lock, pdb
	if err := d.openJournal(journaled); err != nil {
		d.closeJournal()
		_ = pdb.Close()
		cache.Unref()
		lock.Release()
		return nil, err
	}
	top, floor, last, err := d.recoverKeys()
	if err != nil {
		d.closeJournal()
		_ = pdb.Close()
		cache.Unref()
		lock.Release()
		return nil, err
	}
	d.floor = floor
	d.durable.Store(uint64(top))
	d.seedRecent(top, last)
	d.stats.Start(top)
	// Never reissue a key at or below one on disk, whatever the clock says.
	d.hlc = hlc.New(opts.Clock, max(top, floor))
	switch opts.Sync {
	case driver.SyncAlways:
		d.pending = make(chan pendingCommit, 4096)
		d.completer.Add(1)
		go d.complete()
	case driver.SyncInterval:
		d.completer.Add(1)
		go func() {
			defer d.completer.Done()
			kvlog.SyncEvery(d.stop, opts.Interval(), d.syncInterval, d.log)
		}()
	}
	return d, nil
}

// recoverKeys returns the highest log key on disk, the truncation floor,
// and the payloads of the last commit's log entries (none when the log is
// empty), in index order.
func (d *db) recoverKeys() (top, floor driver.LogKey, last [][]byte, err error) {
	if v, closer, gerr := d.pdb.Get(kvlog.MetaFloor); gerr == nil {
		floor, err = kvlog.DecodeFloor(v)
		closer.Close()
		if err != nil {
			return 0, 0, nil, err
		}
	} else if !errors.Is(gerr, pebble.ErrNotFound) {
		return 0, 0, nil, fmt.Errorf("pebble: read truncation floor: %w", gerr)
	}
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: []byte{kvlog.LogPrefix}, UpperBound: kvlog.LogUpper})
	if err != nil {
		return 0, 0, nil, fmt.Errorf("pebble: recover log keys: %w", err)
	}
	defer it.Close()
	found := 0
	for ok := it.Last(); ok; ok = it.Prev() {
		e, err := kvlog.DecodeEntry(it.Key(), it.Value())
		if err != nil && last != nil {
			// The readers that meet the entry report it.
			return top, floor, nil, it.Error()
		}
		if err != nil {
			return 0, 0, nil, err
		}
		if last != nil && e.Key != top {
			break
		}
		if last == nil {
			top, last = e.Key, make([][]byte, e.Count)
		}
		if e.Index < uint32(len(last)) && e.Count == uint32(len(last)) {
			last[e.Index] = bytes.Clone(e.Value)
			found++
		}
	}
	if found != len(last) {
		// Not the commit's whole set of entries: the readers that meet
		// them report it; the recent entries are seeded with none.
		last = nil
	}
	return top, floor, last, it.Error()
}

// seedRecent starts the recent entries over the log as opened: its last
// commit's entries (last), or, when the log is empty (top 0), the whole
// log. Entries it could not read whole seed nothing.
func (d *db) seedRecent(top driver.LogKey, last [][]byte) {
	if top != 0 && last == nil {
		d.recent.Reset()
		return
	}
	d.recent.Open(top, last)
}

// markDurable raises the durable log key to k, unless it is past it.
func (d *db) markDurable(k driver.LogKey) {
	for {
		cur := d.durable.Load()
		if cur >= uint64(k) || d.durable.CompareAndSwap(cur, uint64(k)) {
			return
		}
	}
}

func (d *db) Name() string                    { return Name }
func (d *db) Granularity() driver.Granularity { return driver.PerTransaction }

func (d *db) Submit(ctx context.Context, b *driver.Batch) (*driver.Handle, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("pebble: submit: %w", driver.ErrClosed)
	}
	// Checked under mu before every apply: after a failed write Pebble's
	// WAL writer fails (or panics on) every later commit.
	if err := d.failed(); err != nil {
		d.mu.Unlock()
		return driver.Completed(driver.Result{}, fmt.Errorf("pebble: submit: %w", err)), nil
	}
	pb := d.pdb.NewBatch()
	for i := range b.Ops {
		// Keys and values go straight into the batch's buffer.
		op := &b.Ops[i]
		var dop *pebble.DeferredBatchOp
		if op.Kind == driver.OpPut {
			dop = pb.SetDeferred(len(op.Key)+1, len(op.Value))
			copy(dop.Value, op.Value)
		} else {
			dop = pb.DeleteDeferred(len(op.Key) + 1)
		}
		kvlog.DataKey(dop.Key[:0], op.Key)
		_ = dop.Finish()
	}
	if err := d.checkLocked(b.Checks); err != nil {
		d.mu.Unlock()
		_ = pb.Close()
		return driver.Completed(driver.Result{}, err), nil
	}
	// Every entry of the commit's log takes one key, k.
	var k driver.LogKey
	var logBytes uint64 // as statsSource.Scan sizes the entries
	if n := len(b.Log); n > 0 {
		k = d.hlc.Next()
		for i, entry := range b.Log {
			vlen := kvlog.LogValueLen(uint32(n), entry)
			dop := pb.SetDeferred(kvlog.LogKeyLen, vlen)
			kvlog.PutLogKey(dop.Key, k, uint32(i))
			kvlog.PutLogValue(dop.Value, uint32(n), entry)
			_ = dop.Finish()
			logBytes += uint64(kvlog.LogKeyLen + vlen)
		}
	}
	applied := func(err error) {
		d.appliedLocked(b.Ops, err)
		switch {
		case len(b.Log) == 0:
		case err != nil:
			d.stats.AppendUnknown()
		default:
			d.recent.Add(k, b.Log)
			// Counted as applied: a retention pass's LogStats then
			// reads none of the log written since the last.
			d.stats.Appended(k, len(b.Log), logBytes)
		}
	}
	// Under SyncNone and SyncInterval a commit is journaled instead of
	// waited for (submitJournaled), where the journal is in use.
	// Otherwise every mode applies a commit with a sync of the WAL, so
	// that it completes only once Pebble has written it to the file: without one,
	// Pebble keeps the WAL's last block in memory until it fills, and a
	// process crash lost the commits completed in it. Under SyncNone and
	// SyncInterval the WAL's own sync does nothing (see watchFS.walNoSync),
	// and the committer waits for the write itself, outside mu: a hand-off
	// to the completer and from it to whoever waits on the handle cost
	// more than the write. Commits of other goroutines meanwhile share the
	// WAL writer's next write.
	if d.jr != nil {
		return d.submitJournaled(pb, b, k, applied), nil
	}
	if d.opts.Sync != driver.SyncAlways {
		err := d.guard("apply", func() error { return d.pdb.ApplyNoSyncWait(pb, pebble.Sync) })
		applied(err)
		if err != nil {
			d.mu.Unlock()
			return driver.Completed(driver.Result{}, err), nil
		}
		// Close waits for the write: Pebble must not close under it.
		d.writing.Add(1)
		d.mu.Unlock()
		// The commit's place and visibility are fixed: a caller that
		// orders its submits lets the next one in to share the write.
		if b.Ordered != nil {
			b.Ordered()
		}
		err = pb.SyncWait()
		_ = pb.Close()
		d.writing.Done()
		if err != nil {
			err = fmt.Errorf("pebble: write: %w: %w", driver.ErrWriteFailed, err)
			d.fail(err)
			return driver.Completed(driver.Result{}, err), nil
		}
		if len(b.Log) > 0 {
			// Another committer's later key may be stored already: the
			// WAL is written in order, so this one is written too.
			d.markDurable(k)
			// Watch announces log entries; a state-only commit would
			// only wake every tailer to find nothing new.
			d.notifier.Notify()
		}
		return driver.CompletedLog(k, len(b.Log)), nil
	}
	var res driver.Result
	if n := len(b.Log); n > 0 {
		res.Keys = make([]driver.LogKey, n)
		for i := range res.Keys {
			res.Keys[i] = k
		}
	}
	h, complete := driver.NewHandle()
	if d.gate.Defer(b) {
		// In the WAL before any later commit, so that commit's sync
		// makes it durable too (see complete).
		err := d.guard("apply", func() error { return d.pdb.Apply(pb, pebble.NoSync) })
		applied(err)
		_ = pb.Close()
		if err != nil {
			d.mu.Unlock()
			return driver.Completed(driver.Result{}, err), nil
		}
		d.pending <- pendingCommit{complete: complete, res: res}
		d.mu.Unlock()
		return h, nil
	}
	err := d.guard("apply", func() error { return d.pdb.ApplyNoSyncWait(pb, pebble.Sync) })
	applied(err)
	if err != nil {
		d.mu.Unlock()
		// A batch Pebble panicked on is left to the collector: its
		// state is unknown.
		return driver.Completed(driver.Result{}, err), nil
	}
	// Queued under mu so the completer sees commits in apply order.
	d.pending <- pendingCommit{batch: pb, complete: complete, res: res}
	d.mu.Unlock()
	return h, nil
}

// appliedLocked brings the check cache up to date after an apply of ops
// that returned err; mu held.
func (d *db) appliedLocked(ops []driver.Op, err error) {
	if err != nil {
		d.checks.reset() // applied or not: unknown
		d.recent.Reset()
		return
	}
	d.checks.applied(ops)
}

// checkLocked evaluates a batch's checks against the latest applied state
// (from the check cache where it holds the key); mu is held, so no commit
// can land between the check and the apply.
func (d *db) checkLocked(checks []driver.Check) (err error) {
	var key []byte
	r := pointReader{d: d}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = fmt.Errorf("pebble: check: %w", cerr)
		}
	}()
	for i := range checks {
		c := &checks[i]
		if cached, err := d.checks.eval(c); cached {
			if err != nil {
				return err
			}
			continue
		}
		key = kvlog.DataKey(key, c.Key)
		v, found, err := r.get(key)
		switch {
		case err != nil:
			return fmt.Errorf("pebble: check %q: %w", c.Key, err)
		case !found:
			d.checks.learn(c.Key, false, nil)
			if !c.Absent {
				return fmt.Errorf("pebble: %w: key %q is absent", driver.ErrConflict, c.Key)
			}
		default:
			d.checks.learn(c.Key, true, v)
			if c.Absent || !bytes.Equal(v, c.Value) {
				return fmt.Errorf("pebble: %w: key %q holds another value", driver.ErrConflict, c.Key)
			}
		}
	}
	return nil
}

// checkIterOptions read the bottom level's bloom filters too, which Get
// leaves out: a check is most often of a key that is absent (a free
// staging slot), and while the store is small the bottom level holds
// nearly every table, so without its filters such a check loaded an index
// and a data block of a table for nothing.
var checkIterOptions = pebble.IterOptions{UseL6Filters: true}

// pointGet reads key's current value (a copy) through an iterator that
// uses every level's filters.
func (d *db) pointGet(key []byte) (value []byte, found bool, err error) {
	r := pointReader{d: d}
	value, found, err = r.get(key)
	return value, found, errors.Join(err, r.close())
}

// pointReader reads keys' current values through one iterator, made at its
// first read, so a commit whose checks miss the check cache (a group of
// QoS 2 stagings on packet ids never used before) pays for one iterator
// and not one per key: making and closing one cost as much as the seek.
// Its reads see the store as of that first read; its owner holds db.mu
// from then until close, so no commit lands in between.
type pointReader struct {
	d  *db
	it *pebble.Iterator
}

// get reads key's current value (a copy).
func (r *pointReader) get(key []byte) (value []byte, found bool, err error) {
	if r.it == nil {
		if r.it, err = r.d.pdb.NewIter(&checkIterOptions); err != nil {
			return nil, false, err
		}
	}
	if r.it.SeekPrefixGE(key) && bytes.Equal(r.it.Key(), key) {
		var v []byte
		if v, err = r.it.ValueAndErr(); err == nil {
			value, found = bytes.Clone(v), true
		}
	}
	return value, found, err
}

// close releases the iterator, if one was made.
func (r *pointReader) close() error {
	if r.it == nil {
		return nil
	}
	err := r.it.Close()
	r.it = nil
	return err
}

// complete waits for each applied commit's sync, in apply order. Syncs are
// sequential in the WAL, so waiting in order costs nothing and makes
// completion order equal commit order.
//
// Deferred commits were applied without a sync: they are held until a
// later commit's sync, which covers everything before it in the WAL, or
// until the defer window of the first of them has passed, when one sync
// of the WAL covers them all.
func (d *db) complete() {
	defer d.completer.Done()
	var held []pendingCommit
	var one [1]pendingCommit
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var p pendingCommit
		ok := true
		if len(held) == 0 {
			p, ok = <-d.pending
		} else {
			select {
			case p, ok = <-d.pending:
			case <-timer.C:
				d.finish(held, d.syncWAL())
				held = held[:0]
				continue
			}
		}
		if !ok {
			if len(held) > 0 {
				d.finish(held, d.syncWAL())
			}
			break
		}
		if p.barrier != nil {
			if len(held) > 0 {
				timer.Stop()
				d.finish(held, d.syncWAL())
				held = held[:0]
			}
			close(p.barrier)
			continue
		}
		if p.batch == nil {
			if len(held) == 0 {
				timer.Reset(d.gate.Window())
			}
			held = append(held, p)
			continue
		}
		err := p.batch.SyncWait()
		_ = p.batch.Close()
		if err != nil {
			err = fmt.Errorf("pebble: sync: %w: %w", driver.ErrWriteFailed, err)
			d.fail(err)
		}
		if len(held) > 0 {
			timer.Stop()
			d.finish(held, err)
			held = held[:0]
		}
		one[0] = p
		d.finish(one[:], err)
	}
	d.notifier.Notify()
}

// syncWAL makes every applied commit durable, or reports why not. The
// caller is the completer: no reopen swaps the DB under it (reopen waits
// for the completer at a barrier first).
func (d *db) syncWAL() error {
	if err := d.failed(); err != nil {
		return err
	}
	return d.guard("sync", func() error { return d.pdb.LogData(nil, pebble.Sync) })
}

// syncInterval is the periodic sync of SyncInterval: the one sync of
// the WAL that reaches the disk (see watchFS.walNoSync).
func (d *db) syncInterval() error {
	d.fs.forceSync.Add(1)
	defer d.fs.forceSync.Add(-1)
	if !d.readers.Enter() {
		return nil
	}
	defer d.readers.RUnlock()
	if d.pdb == nil || d.failed() != nil {
		return nil
	}
	if d.jr != nil {
		return d.guard("sync", d.jr.sync)
	}
	return d.guard("sync", func() error { return d.pdb.LogData(nil, pebble.Sync) })
}

// finish completes durable (or failed) commits, in order.
func (d *db) finish(ps []pendingCommit, err error) {
	announce := false
	for _, p := range ps {
		if err != nil {
			p.complete(driver.Result{}, err)
			continue
		}
		if len(p.res.Keys) > 0 {
			d.durable.Store(uint64(p.res.Keys[0]))
			announce = true
		}
		p.complete(p.res, nil)
	}
	// Announce every durable log entry at once: waiting for a lull in
	// the queue would starve watchers under sustained load. Watch
	// channels coalesce, so this costs a non-blocking send per watcher.
	if announce {
		d.notifier.Notify()
	}
}

func (d *db) Watch(ctx context.Context) <-chan struct{} { return d.notifier.Subscribe(ctx) }

func (d *db) ScanLog(ctx context.Context, from driver.LogKey, exclusive bool, fn func(driver.Entry) bool) error {
	if exclusive && from == ^driver.LogKey(0) {
		return nil
	}
	return kvlog.ScanPages(ctx, Name, from, exclusive, d.readLogPage, fn)
}

const scanPage = 256

func (d *db) readLogPage(dst []driver.Entry, seek []byte, start driver.LogKey, checkFloor bool) ([]driver.Entry, []byte, error) {
	if !d.readers.Enter() {
		return nil, nil, fmt.Errorf("pebble: scan log: %w", driver.ErrClosed)
	}
	defer d.readers.RUnlock()
	if err := d.downLocked("scan log"); err != nil {
		return nil, nil, err
	}
	if checkFloor {
		if err := kvlog.CheckFloor(start, d.floor); err != nil {
			return nil, nil, err
		}
	}
	durable := driver.LogKey(d.durable.Load())
	if page, next, ok := d.recent.Page(dst, seek, durable, scanPage); ok {
		return page, next, nil
	}
	it, err := d.pdb.NewIter(&pebble.IterOptions{LowerBound: seek, UpperBound: kvlog.LogUpper})
	if err != nil {
		return nil, nil, fmt.Errorf("pebble: scan log: %w", err)
	}
	defer it.Close()
	page := dst[:0]
	for ok := it.First(); ok; ok = it.Next() {
		if len(page) == scanPage {
			return page, append([]byte(nil), it.Key()...), nil
		}
		e, err := kvlog.DecodeEntry(it.Key(), it.Value())
		if err != nil {
			return nil, nil, err
		}
		if e.Key > durable {
			break
		}
		page = append(page, e)
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("pebble: scan log: %w", err)
	}
	return page, nil, nil
}

func (d *db) Truncate(ctx context.Context, below driver.LogKey) error {
	if !d.readers.LockOpen() {
		return fmt.Errorf("pebble: truncate: %w", driver.ErrClosed)
	}
	defer d.readers.Unlock()
	if err := d.downLocked("truncate"); err != nil {
		return err
	}
	if below <= d.floor {
		return nil
	}
	if err := d.failed(); err != nil {
		return fmt.Errorf("pebble: truncate: %w", err)
	}
	b := d.pdb.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(kvlog.LogSeek(0), kvlog.LogSeek(below), nil)
	_ = b.Set(kvlog.MetaFloor, kvlog.EncodeFloor(below), nil)
	// Without a WAL (journal.go) the truncation is made durable by the
	// next flush; one a crash takes back is done again.
	wo := pebble.Sync
	if d.popts.DisableWAL {
		wo = pebble.NoSync
	}
	if err := d.guard("truncate", func() error { return d.pdb.Apply(b, wo) }); err != nil {
		return err
	}
	d.floor = below
	return nil
}

func (d *db) LogStats(ctx context.Context) (driver.LogStats, error) {
	if !d.readers.Enter() {
		return driver.LogStats{}, fmt.Errorf("pebble: log stats: %w", driver.ErrClosed)
	}
	defer d.readers.RUnlock()
	if err := d.downLocked("log stats"); err != nil {
		return driver.LogStats{}, err
	}
	st, err := d.stats.Stats(ctx, statsSource{d})
	if err != nil {
		return st, fmt.Errorf("pebble: log stats: %w", err)
	}
	return st, nil
}

// statsSource is the log as the stats counter reads it; readers is held
// (shared, so the floor stays: Truncate holds it exclusively).
type statsSource struct{ d *db }

func (s statsSource) Floor(context.Context) (driver.LogKey, error) { return s.d.floor, nil }

func (s statsSource) Scan(ctx context.Context, from driver.LogKey, fn func(driver.LogKey, uint64) bool) error {
	it, err := s.d.pdb.NewIter(&pebble.IterOptions{LowerBound: kvlog.LogSeek(from), UpperBound: kvlog.LogUpper, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return errors.Join(err, it.Close())
			}
		}
		k, err := kvlog.KeyOf(it.Key())
		if err != nil {
			return errors.Join(err, it.Close())
		}
		if !fn(k, uint64(len(it.Key())+len(it.Value()))) {
			break
		}
	}
	return errors.Join(it.Error(), it.Close())
}

func (d *db) Snapshot(ctx context.Context) (driver.Snapshot, error) {
	if !d.readers.LockOpen() {
		return nil, fmt.Errorf("pebble: snapshot: %w", driver.ErrClosed)
	}
	defer d.readers.Unlock()
	if err := d.downLocked("snapshot"); err != nil {
		return nil, err
	}
	s := &snapshot{d: d, snap: d.pdb.NewSnapshot(), iters: map[*iterator]struct{}{}}
	d.readers.Add(s)
	return s, nil
}

func (d *db) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("pebble: close: %w", driver.ErrClosed)
	}
	d.closed = true
	if d.pending != nil {
		close(d.pending)
	}
	close(d.stop)
	d.mu.Unlock()
	d.completer.Wait()
	d.writing.Wait()
	d.recMu.Lock()
	d.recStopped = true
	d.recMu.Unlock()
	d.recWG.Wait()
	d.notifier.Close()

	// closing: the reader is dropped either way
	endSnapshot := func(s *snapshot) { _ = s.closeLocked() }
	err := d.readers.Close(endSnapshot, func() error {
		var err error
		switch {
		case d.pdb == nil:
		case d.failure.Load() != nil:
			err = d.closeFailed(d.pdb)
		default:
			if d.jr != nil {
				// The next open then finds every commit in the tables,
				// with nothing of the journal to apply again.
				if ferr := d.pdb.Flush(); ferr != nil {
					d.log.Warn("flushing the store at close failed; the journal keeps its commits", "err", ferr)
				}
			}
			err = d.pdb.Close()
		}
		d.closeJournal()
		d.cache.Unref()
		d.lock.Release()
		return err
	})
	if err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}
