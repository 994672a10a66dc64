// Package badger is a Tidemark engine on github.com/dgraph-io/badger/v4.
// Importing it registers the engine as "badger".
//
// Log keys are per transaction: every entry of one commit carries the same
// hybrid-logical-clock timestamp. Keys come from the engine's own clock, not
// from Badger's commit timestamps, because the engine packs many commits
// into one Badger transaction and each commit needs a key of its own.
//
// # Group commit
//
// Badger syncs its write-ahead log once per Badger transaction, even when
// many transactions commit at once, so committing each Tidemark commit in a
// transaction of its own would cap synced throughput at one commit per
// sync. Instead one writer goroutine takes every submitted commit that is
// waiting, evaluates each commit's checks and applies its writes in order
// inside ONE Badger transaction (split into several when Badger's
// transaction size limit would be passed), commits it, and then completes
// the handles in submission order. Log keys are assigned by the writer in
// queue order, so key order, commit order and visibility order agree. A
// commit whose check fails sees the earlier commits of its own group,
// contributes nothing and completes with engine.ErrConflict; the others in
// the group are unaffected. The engine runs Badger in managed mode and
// issues Badger's versions itself (see versions): with one writer
// committing in order, Badger's own timestamp bookkeeping is only cost. When fewer commits arrived since the last
// group completed than that group held, the writer waits a little (at most
// 250µs, and at most half the last group's commit time) for the rest, so
// closed-loop submitters do not split into two groups and pay two syncs.
// Under SyncAlways a group of only deferred commits (Batch.Defer) waits up
// to the defer window for a commit that is not deferred, and goes with it.
// A commit becomes visible to readers when the Badger transaction carrying
// it commits, which under SyncAlways is after its sync: readers never see a
// commit that is not yet durable.
//
// # Durability
//
//   - SyncAlways (Badger's SyncWrites on): Badger syncs the memtable
//     write-ahead log and the value log before the Badger transaction
//     returns; a handle completes after that.
//     A completed commit survives a process crash, an operating-system crash
//     and power loss (as far as the disk honours its flushes).
//     Badger syncs two files per transaction, its value log (even when
//     the transaction put nothing there) and the memtable's log, and on
//     ext4 each sync flushes the disk's cache, written data or not: one
//     writer commits about 0.7x as often as a raw fdatasync loop (Pebble,
//     one sync: 0.95x), and groups pay both flushes too.
//   - SyncInterval: SyncWrites off. A handle completes once its transaction
//     is written to Badger's memory-mapped logs, that is into the operating
//     system's page cache, so a process crash (even SIGKILL) loses no
//     completed commit. The engine calls DB.Sync every Options.Interval();
//     an operating-system crash or power loss can lose the commits completed
//     since the last sync that finished.
//   - SyncNone: SyncWrites off and no periodic sync. A process crash loses
//     no completed commit; an operating-system crash or power loss can lose
//     anything the kernel had not yet written back (Badger itself syncs the
//     tables it writes when it flushes a memtable, and its logs on Close).
//
// In every mode a crash never leaves a partial commit: Badger replays its
// log by whole transactions.
//
// # Limits and parameters
//
// Every batch within the engine limits (engine.MaxBatchEntries,
// engine.MaxBatchBytes) fits one Badger transaction: the engine derives the
// value threshold (values shorter than it live in the LSM tree, longer ones
// in the value log) from the memtable size so that a batch of the largest
// keys still fits. Params:
//
//   - memtable_mb (default 64, 32 to 1024): memtable size in MiB. Badger
//     allows a transaction 15% of it; larger memtables keep more values in
//     the LSM tree and group more commits into one transaction. The value
//     threshold is 735 bytes at 64 MiB and 121 bytes at 32 MiB.
//   - cache_mb (default 16, 1 to 65536): block cache size in MiB.
//
// Memory: an open engine holds a memtable arena of about 1.3 x memtable_mb
// (Badger sizes it to take one full transaction on top of the memtable),
// up to two more while flushes are pending, and the block cache.
//
// Value-log space freed by deletes and truncation is reclaimed by a
// background value-log garbage collection every few minutes.
package badger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/skl"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// Name is the registered engine name.
const Name = "badger"

// Parameter bounds and defaults, in MiB.
const (
	defaultMemtableMB = 64
	minMemtableMB     = 32
	maxMemtableMB     = 1024
	defaultCacheMB    = 16
	maxCacheMB        = 64 << 10
)

const (
	// queueLen bounds submitted commits waiting for the writer; a full
	// queue blocks Submit (back-pressure). It also bounds one group.
	queueLen = 1024
	// valueLogFileSize is the size at which Badger starts a new value-log
	// file; it must exceed engine.MaxValueSize.
	valueLogFileSize = 64 << 20
	// gcEvery is the period of value-log garbage collection.
	gcEvery = 5 * time.Minute
	// gcDiscardRatio is the share of stale data a value-log file needs for
	// garbage collection to rewrite it.
	gcDiscardRatio = 0.5
)

func init() {
	engine.Register(Name, engine.Driver{
		Open:        open,
		Granularity: engine.PerTransaction,
		Params: []engine.Param{
			{Name: "memtable_mb", Default: strconv.Itoa(defaultMemtableMB),
				Doc: fmt.Sprintf("memtable size in MiB (%d to %d); a Badger transaction may take 15%% of it", minMemtableMB, maxMemtableMB)},
			{Name: "cache_mb", Default: strconv.Itoa(defaultCacheMB),
				Doc: fmt.Sprintf("block cache size in MiB (1 to %d)", maxCacheMB)},
		},
		Doc: "embedded LSM with value log (dgraph-io/badger v4); one log key per transaction; group commit packs waiting commits into one Badger transaction",
	})
}

// db is the engine.
//
// Locks: gate orders Submit against Close (Submit sends under its read
// lock, Close closes the queue under its write lock). rw guards the Badger
// handle: every call into Badger outside the writer holds its read lock,
// Close takes it exclusively after the writer stopped. groupMu is held by
// the writer while a group commits, so Truncate can wait out a group that
// holds keys below its floor. regMu guards readers.
type db struct {
	lock *dirlock.Lock // the data directory, held while open
	bdb  *badger.DB
	opts engine.Options
	hlc  *engine.HLC
	log  *slog.Logger
	lim  txnLimits
	ver  versions

	gate   sync.RWMutex
	closed bool
	queue  chan *pending

	groupMu    sync.Mutex
	txns       atomic.Uint64 // Badger transactions the writer committed
	truncateMu sync.Mutex
	floor      atomic.Uint64

	rw      sync.RWMutex
	rclosed bool
	regMu   sync.Mutex
	readers map[*snapshot]struct{}

	notifier   engine.Notifier
	writerDone chan struct{}
	deferGate  *deferral.Gate // picks the deferred commits that wait for company
	bg         sync.WaitGroup
	stop       chan struct{}
}

func open(ctx context.Context, opts engine.Options) (engine.Engine, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: badger needs a data directory (Options.Dir)", engine.ErrInvalidOption)
	}
	memMB, err := engine.IntParam(opts, "badger", "memtable_mb", defaultMemtableMB, minMemtableMB, maxMemtableMB)
	if err != nil {
		return nil, err
	}
	cacheMB, err := engine.IntParam(opts, "badger", "cache_mb", defaultCacheMB, 1, maxCacheMB)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("badger: create %s: %w", opts.Dir, err)
	}
	log := opts.Log().With("engine", Name)
	lim := limitsFor(int64(memMB) << 20)
	bopts := badger.DefaultOptions(opts.Dir).
		WithLogger(slogLogger{log}).
		WithSyncWrites(opts.Sync == engine.SyncAlways).
		WithMemTableSize(int64(memMB) << 20).
		WithNumMemtables(3).
		WithBlockCacheSize(int64(cacheMB) << 20).
		WithIndexCacheSize(0).
		WithValueThreshold(lim.valueThreshold).
		WithValueLogFileSize(valueLogFileSize).
		WithNumCompactors(2).
		// Only the writer goroutine writes data keys, so Badger's
		// optimistic conflict detection has nothing to find.
		WithDetectConflicts(false).
		// Badger's metrics are process-global expvars.
		WithMetricsEnabled(false)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lock, err := dirlock.Take(Name, opts.Dir)
	if err != nil {
		return nil, err
	}
	bdb, err := badger.OpenManaged(bopts)
	if err != nil {
		lock.Release()
		return nil, fmt.Errorf("badger: open %s: %w", opts.Dir, err)
	}
	d := &db{
		lock:       lock,
		bdb:        bdb,
		opts:       opts,
		log:        log,
		lim:        lim,
		queue:      make(chan *pending, queueLen),
		readers:    map[*snapshot]struct{}{},
		writerDone: make(chan struct{}),
		deferGate:  deferral.NewGate(opts.Deferral()),
		stop:       make(chan struct{}),
	}
	d.ver.init(bdb.MaxVersion())
	top, floor, err := d.recoverKeys()
	if err == nil {
		// A truncation interrupted by a crash raised the floor first;
		// finish removing what it left below.
		err = d.deleteLogBelow(ctx, floor)
	}
	if err != nil {
		_ = bdb.Close()
		lock.Release()
		return nil, err
	}
	d.floor.Store(uint64(floor))
	// Never reissue a key at or below one on disk, whatever the clock says.
	d.hlc = engine.NewHLC(opts.Clock, max(top, floor))
	go d.writer()
	if opts.Sync == engine.SyncInterval {
		d.bg.Add(1)
		go func() {
			defer d.bg.Done()
			kvlog.SyncEvery(d.stop, opts.Interval(), d.bdb.Sync, d.log)
		}()
	}
	d.bg.Add(2)
	go d.every(gcEvery, d.collectGarbage)
	go d.every(discardEvery, d.advanceDiscard)
	return d, nil
}

// txnLimits are the Badger transaction limits the writer packs commits
// into, and the value threshold that makes any valid batch fit one.
type txnLimits struct {
	size, count    int64
	valueThreshold int64
}

// limitsFor mirrors Badger's accounting: a transaction may hold 15% of the
// memtable, each entry counting its key, its value (or a 12-byte pointer
// when the value goes to the value log), 2 bytes of metadata and 10 bytes
// of version; one extra entry marks the transaction's end. The threshold is
// chosen so that MaxBatchEntries entries of the largest key and a value just
// under the threshold still fit.
func limitsFor(memtable int64) txnLimits {
	size := memtable * 15 / 100
	const reserve = 64 // Badger's end-of-transaction entry, with room to spare
	perEntry := int64(1+engine.MaxKeySize) + 12
	t := (size-reserve)/engine.MaxBatchEntries - perEntry
	return txnLimits{
		size:           size - reserve,
		count:          size/int64(skl.MaxNodeSize) - 2,
		valueThreshold: min(t, 1<<20),
	}
}

// entrySize is Badger's estimate of one entry in a transaction.
func (l txnLimits) entrySize(key, value int) int64 {
	if int64(value) < l.valueThreshold {
		return int64(key+value) + 12
	}
	return int64(key) + 24
}

// recoverKeys returns the highest log key on disk and the truncation floor.
func (d *db) recoverKeys() (top, floor engine.LogKey, err error) {
	txn := d.newTxn(false)
	defer d.endTxn(txn)
	item, err := txn.Get(kvlog.MetaFloor)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return 0, 0, fmt.Errorf("badger: read truncation floor: %w", err)
	default:
		v, err := item.ValueCopy(nil)
		if err != nil {
			return 0, 0, fmt.Errorf("badger: read truncation floor: %w", err)
		}
		if floor, err = kvlog.DecodeFloor(v); err != nil {
			return 0, 0, err
		}
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kvlog.LogPrefix}, Reverse: true})
	defer it.Close()
	it.Seek(logSeekLast)
	if it.Valid() {
		k, err := logKeyOf(it.Item().Key())
		if err != nil {
			return 0, 0, err
		}
		top = k
	}
	return top, floor, nil
}

// logSeekLast sorts after every stored log key.
var logSeekLast = append([]byte{kvlog.LogPrefix}, bytesOf(kvlog.LogKeyLen-1, 0xff)...)

func bytesOf(n int, c byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func (d *db) Name() string                    { return Name }
func (d *db) Granularity() engine.Granularity { return engine.PerTransaction }

func (d *db) Watch(ctx context.Context) <-chan struct{} { return d.notifier.Subscribe(ctx) }

// every runs fn every period until the engine stops.
func (d *db) every(period time.Duration, fn func()) {
	defer d.bg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// collectGarbage runs value-log garbage collection, rewriting files until
// Badger finds none worth rewriting or the engine stops.
func (d *db) collectGarbage() {
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		err := d.bdb.RunValueLogGC(gcDiscardRatio)
		if err == nil {
			continue
		}
		if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
			d.log.Warn("value-log garbage collection failed", "err", err)
		}
		return
	}
}

// Close stops accepting commits, waits for the submitted ones to complete,
// closes open snapshots and iterators and closes Badger.
func (d *db) Close() error {
	d.gate.Lock()
	if d.closed {
		d.gate.Unlock()
		return fmt.Errorf("badger: close: %w", engine.ErrClosed)
	}
	d.closed = true
	close(d.queue)
	d.gate.Unlock()
	<-d.writerDone
	close(d.stop)
	d.bg.Wait()
	d.notifier.Close()

	d.rw.Lock()
	defer d.rw.Unlock()
	d.rclosed = true
	d.regMu.Lock()
	for s := range d.readers {
		s.closeAll()
	}
	d.readers = nil
	d.regMu.Unlock()
	defer d.lock.Release()
	if err := d.bdb.Close(); err != nil {
		return fmt.Errorf("badger: close: %w", err)
	}
	return nil
}

// slogLogger routes Badger's logs to slog. Badger's info chatter goes to
// debug level; messages are formatted only when the level is enabled,
// because Badger logs at debug level on every write.
type slogLogger struct{ l *slog.Logger }

func (l slogLogger) logf(level slog.Level, format string, args []any) {
	if !l.l.Enabled(context.Background(), level) {
		return
	}
	msg := fmt.Sprintf(format, args...)
	for len(msg) > 0 && (msg[len(msg)-1] == '\n' || msg[len(msg)-1] == ' ') {
		msg = msg[:len(msg)-1]
	}
	l.l.Log(context.Background(), level, msg)
}

func (l slogLogger) Errorf(format string, args ...any)   { l.logf(slog.LevelError, format, args) }
func (l slogLogger) Warningf(format string, args ...any) { l.logf(slog.LevelWarn, format, args) }
func (l slogLogger) Infof(format string, args ...any)    { l.logf(slog.LevelDebug, format, args) }
func (l slogLogger) Debugf(format string, args ...any)   { l.logf(slog.LevelDebug, format, args) }
