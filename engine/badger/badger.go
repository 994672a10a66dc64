//go:build !nobadger

package badger

import (
	"bytes"
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
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/internal/group"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
	"github.com/tidemark-io/tidemark/engine/internal/logstats"
	"github.com/tidemark-io/tidemark/engine/internal/snapguard"
	"github.com/tidemark-io/tidemark/engine/internal/space"
	"github.com/tidemark-io/tidemark/internal/hlc"
)

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
	// file; it must exceed driver.MaxValueSize.
	valueLogFileSize = 64 << 20
	// gcEvery is the period of value-log garbage collection.
	gcEvery = 5 * time.Minute
	// gcDiscardRatio is the share of stale data a value-log file needs for
	// garbage collection to rewrite it.
	gcDiscardRatio = 0.5
)

func init() {
	driver.Register(Name, driver.Driver{
		Open: open,
		Params: []driver.Param{
			{Name: "memtable_mb", Default: strconv.Itoa(defaultMemtableMB),
				Doc: fmt.Sprintf("memtable size in MiB (%d to %d); a Badger transaction may take 15%% of it", minMemtableMB, maxMemtableMB)},
			{Name: "cache_mb", Default: strconv.Itoa(defaultCacheMB),
				Doc: fmt.Sprintf("block cache size in MiB (1 to %d)", maxCacheMB)},
			{Name: "reserve_mb", Default: fmt.Sprintf("%d x memtable_mb", defaultReserveMemtables),
				Doc: "free space in MiB commits leave on the data directory's file system for Badger's flushes and compactions (0 to 1048576); commits that would use it are refused with driver.ErrWriteFailed"},
		},
		Doc: "embedded LSM with value log (dgraph-io/badger v4); one log key per transaction; group commit packs waiting commits into one Badger transaction",
	})
}

// db is the engine.
//
// Locks: the engine front never calls Submit during or after Close, so
// the queue (engine/internal/group) needs no lock of its own against it;
// gate guards closed, which the space probe reads. rw guards the Badger
// handle: every call into Badger outside the writer holds its read lock,
// Close takes it exclusively after the writer stopped. groupMu is held by
// the writer while a group commits, so Truncate can wait out a group that
// holds keys below its floor. guard keeps Badger
// open under reads (engine/internal/snapguard).
type db struct {
	lock *dirlock.Lock // the data directory, held while open
	bdb  *badger.DB
	opts driver.Options
	hlc  *hlc.Clock
	log  *slog.Logger
	lim  txnLimits
	ver  versions
	// space refuses commits that would leave less than reserve() free on
	// the data directory's file system (see space.go).
	space        *space.Guard
	reserveBytes int64

	gate   sync.RWMutex
	closed bool
	queue  *group.Queue[*pending]

	groupMu    sync.Mutex
	txns       atomic.Uint64 // Badger transactions the writer committed
	truncateMu sync.Mutex
	floor      atomic.Uint64
	// stats keeps the log's figures between LogStats calls.
	stats logstats.Counter

	// guard keeps Badger open under every read and ends the open
	// snapshots on Close (engine/internal/snapguard).
	guard *snapguard.Guard[*snapshot]

	notifier driver.Notifier
	// recent holds the latest commits' log entries, added by the writer
	// in log order once their transaction committed.
	recent     kvlog.Recent
	writerDone chan struct{}
	deferGate  *deferral.Gate // picks the deferred commits that wait for company
	bg         sync.WaitGroup
	stop       chan struct{}
}

func open(ctx context.Context, opts driver.Options) (driver.Engine, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: badger needs a data directory (Options.Dir)", driver.ErrInvalidOption)
	}
	memMB, err := driver.IntParam(opts, "badger", "memtable_mb", defaultMemtableMB, minMemtableMB, maxMemtableMB)
	if err != nil {
		return nil, err
	}
	cacheMB, err := driver.IntParam(opts, "badger", "cache_mb", defaultCacheMB, 1, maxCacheMB)
	if err != nil {
		return nil, err
	}
	reserveMB, err := driver.IntParam(opts, "badger", "reserve_mb", defaultReserveMemtables*memMB, 0, 1<<20)
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
		WithSyncWrites(opts.Sync == driver.SyncAlways).
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
		guard:      snapguard.New[*snapshot](),
		writerDone: make(chan struct{}),
		deferGate:  deferral.NewGate(opts.Deferral()),
		stop:       make(chan struct{}),

		reserveBytes: int64(reserveMB) << 20,
	}
	d.queue = d.newQueue()
	d.space = space.NewGuard("badger", opts.Dir, d.reserve, log)
	d.ver.init(bdb.MaxVersion())
	top, floor, last, err := d.recoverKeys()
	if err == nil {
		// A truncation interrupted by a crash raised the floor first;
		// finish removing what it left below.
		err = d.deleteLogBelow(ctx, floor)
	}
	if err != nil {
		d.space.Close()
		_ = bdb.Close()
		lock.Release()
		return nil, err
	}
	d.floor.Store(uint64(floor))
	if top == 0 || last != nil {
		d.recent.Open(top, last)
	}
	// Never reissue a key at or below one on disk, whatever the clock says.
	d.hlc = hlc.New(opts.Clock, max(top, floor))
	go d.writer()
	if opts.Sync == driver.SyncInterval {
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
	perEntry := int64(1+driver.MaxKeySize) + 12
	t := (size-reserve)/driver.MaxBatchEntries - perEntry
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

// recoverKeys returns the highest log key on disk, the truncation floor,
// and the payloads of the last commit's log entries in index order (none
// when the log is empty, or when they are not all there: the readers that
// meet them report it).
func (d *db) recoverKeys() (top, floor driver.LogKey, last [][]byte, err error) {
	txn := d.newTxn(false)
	defer d.endTxn(txn)
	item, err := txn.Get(kvlog.MetaFloor)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return 0, 0, nil, fmt.Errorf("badger: read truncation floor: %w", err)
	default:
		v, err := item.ValueCopy(nil)
		if err != nil {
			return 0, 0, nil, fmt.Errorf("badger: read truncation floor: %w", err)
		}
		if floor, err = kvlog.DecodeFloor(v); err != nil {
			return 0, 0, nil, err
		}
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kvlog.LogPrefix}, Reverse: true})
	defer it.Close()
	found := 0
	for it.Seek(logSeekLast); it.Valid(); it.Next() {
		item := it.Item()
		var e driver.Entry
		var derr error
		if err := item.Value(func(v []byte) error {
			e, derr = kvlog.DecodeEntry(item.Key(), v)
			e.Value = bytes.Clone(e.Value) // v is Badger's only during the call
			return nil
		}); err != nil {
			return 0, 0, nil, fmt.Errorf("badger: recover log keys: %w", err)
		}
		if derr != nil {
			// The readers that meet the entry report it; its key alone
			// sets the top.
			if last == nil {
				if top, err = kvlog.KeyOf(item.Key()); err != nil {
					return 0, 0, nil, err
				}
			}
			return top, floor, nil, nil
		}
		if last != nil && e.Key != top {
			break
		}
		if last == nil {
			top, last = e.Key, make([][]byte, e.Count)
		}
		if e.Index < uint32(len(last)) && e.Count == uint32(len(last)) {
			last[e.Index] = e.Value
			found++
		}
	}
	if found != len(last) {
		last = nil
	}
	return top, floor, last, nil
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
func (d *db) Granularity() driver.Granularity { return driver.PerTransaction }

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
// Badger finds none worth rewriting or the engine stops. It skips a round
// while the disk lacks the room one rewrite may take beyond the reserve:
// a rewrite writes the live values of a value-log file before it frees it.
func (d *db) collectGarbage() {
	for {
		if !d.space.Has(valueLogFileSize) {
			return
		}
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
		return fmt.Errorf("badger: close: %w", driver.ErrClosed)
	}
	d.closed = true
	d.queue.Close()
	d.gate.Unlock()
	<-d.writerDone
	close(d.stop)
	d.bg.Wait()
	d.space.Close()
	d.notifier.Close()

	defer d.lock.Release()
	return d.guard.Close((*snapshot).closeAll, func() error {
		if err := d.bdb.Close(); err != nil {
			return fmt.Errorf("badger: close: %w", err)
		}
		return nil
	})
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
