//go:build cgo && !nolmdb

package lmdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/PowerDNS/lmdb-go/lmdb"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/internal/group"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
	"github.com/tidemark-io/tidemark/engine/internal/logstats"
	"github.com/tidemark-io/tidemark/engine/internal/snapguard"
	"github.com/tidemark-io/tidemark/internal/hlc"
)

const (
	defaultMapSizeMB  = 1024
	defaultMaxReaders = 1024
	maxReaders        = 1 << 16
	// queueLen bounds the commits waiting for the writer; a full queue
	// makes Submit wait, which is the back-pressure.
	queueLen = 4096
)

func init() {
	driver.Register(Name, driver.Driver{
		Open: open,
		Params: []driver.Param{
			{Name: "map_size_mb", Default: strconv.Itoa(defaultMapSizeMB),
				Doc: "initial LMDB map size in MiB; the map doubles whenever it fills, so this only sets where growth starts"},
			{Name: "max_readers", Default: strconv.Itoa(defaultMaxReaders),
				Doc: "LMDB reader-table slots: the most read transactions (open snapshots plus in-flight scans) at once; more wait for a slot"},
		},
		Doc: "embedded B+tree (LMDB via PowerDNS/lmdb-go, cgo); one log key per record; one writer goroutine groups waiting commits into one transaction",
	})
}

// db is the engine.
//
// Writes: Submit and Truncate queue jobs on the shared group-commit queue
// (engine/internal/group), which Close ends; the writer goroutine owns
// every write transaction. mu guards closed.
//
// Reads: the guard (engine/internal/snapguard) is held shared by every
// LMDB call made outside the writer and exclusively while the map is
// resized or the environment closed, so no read runs against a map that
// is moving or gone.
type db struct {
	env  *lmdb.Env
	dbi  lmdb.DBI
	opts driver.Options
	log  *slog.Logger
	hlc  *hlc.Clock
	lock *dirlock.Lock

	mu         sync.RWMutex
	closed     bool
	queue      *group.Queue[*job] // commits and truncation rounds, for the writer
	writerDone chan struct{}
	gate       *deferral.Gate // picks the deferred commits that wait for company

	// guard keeps the environment open under every LMDB call made
	// outside the writer, held exclusively while the map is resized or
	// the environment closed, and ends the open snapshots on Close.
	guard *snapguard.Guard[*snapshot]
	done  chan struct{} // closed by Close; wakes reader-slot waiters
	slots chan struct{} // one token per free reader slot

	notifier driver.Notifier
	// stats keeps the log's figures between LogStats calls.
	statsMu sync.Mutex
	stats   logstats.Counter

	// failure, when set, is the write failure of the latest commit (see
	// health.go).
	failure atomic.Pointer[failure]
}

func open(ctx context.Context, opts driver.Options) (driver.Engine, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: lmdb needs a data directory (Options.Dir)", driver.ErrInvalidOption)
	}
	mapMB, err := driver.IntParam(opts, "lmdb", "map_size_mb", defaultMapSizeMB, 1, 1<<30)
	if err != nil {
		return nil, err
	}
	readers, err := driver.IntParam(opts, "lmdb", "max_readers", defaultMaxReaders, 1, 1<<30)
	if err != nil {
		return nil, err
	}
	if readers > maxReaders {
		return nil, fmt.Errorf("%w: lmdb parameter max_readers=%d: the limit is %d", driver.ErrInvalidOption, readers, maxReaders)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("lmdb: create %s: %w", opts.Dir, err)
	}
	lock, err := dirlock.Take("lmdb", opts.Dir)
	if err != nil {
		return nil, err
	}
	env, err := openEnv(opts, int64(mapMB)<<20, readers)
	if err != nil {
		lock.Release()
		return nil, err
	}
	d := &db{
		env:        env,
		opts:       opts,
		log:        opts.Log().With("engine", Name),
		lock:       lock,
		writerDone: make(chan struct{}),
		gate:       deferral.NewGate(opts.Deferral()),
		done:       make(chan struct{}),
		slots:      make(chan struct{}, readers),
		guard:      snapguard.New[*snapshot](),
	}
	for range readers {
		d.slots <- struct{}{}
	}
	if n, err := env.ReaderCheck(); err != nil {
		d.log.Warn("reader table check failed", "err", err)
	} else if n > 0 {
		d.log.Info("released reader slots of dead processes", "slots", n)
	}
	top, floor, stale, err := d.recover(ctx)
	if err != nil {
		_ = env.Close()
		lock.Release()
		return nil, err
	}
	// Never reissue a key at or below one on disk, whatever the clock says.
	d.hlc = hlc.New(opts.Clock, max(top, floor))
	d.stats.Start(top)
	d.queue = d.newQueue()
	go d.writer()
	if stale {
		// A truncation was cut short (crash or cancelled context): finish
		// removing the entries below the floor.
		if err := d.Truncate(ctx, floor); err != nil {
			_ = d.Close()
			return nil, err
		}
	}
	return d, nil
}

func openEnv(opts driver.Options, mapSize int64, readers int) (*lmdb.Env, error) {
	env, err := lmdb.NewEnv()
	if err != nil {
		return nil, fmt.Errorf("lmdb: create environment: %w", err)
	}
	var flags uint
	if opts.Sync != driver.SyncAlways {
		flags |= lmdb.NoSync
	}
	if err := env.SetMapSize(mapSize); err != nil {
		_ = env.Close()
		return nil, fmt.Errorf("lmdb: map size %d: %w", mapSize, err)
	}
	if err := env.SetMaxReaders(readers); err != nil {
		_ = env.Close()
		return nil, fmt.Errorf("lmdb: max readers %d: %w", readers, err)
	}
	if err := env.Open(opts.Dir, flags, 0o644); err != nil {
		_ = env.Close()
		return nil, fmt.Errorf("lmdb: open %s: %w", opts.Dir, err)
	}
	return env, nil
}

// recover opens the main database and returns the highest log key on disk,
// the truncation floor, and whether entries below the floor are left over.
func (d *db) recover(ctx context.Context) (top, floor driver.LogKey, stale bool, err error) {
	err = d.env.View(func(txn *lmdb.Txn) error {
		dbi, err := txn.OpenRoot(0)
		if err != nil {
			return fmt.Errorf("lmdb: open main database: %w", err)
		}
		d.dbi = dbi
		if floor, err = readFloor(txn, dbi); err != nil {
			return err
		}
		cur, err := txn.OpenCursor(dbi)
		if err != nil {
			return fmt.Errorf("lmdb: recover log keys: %w", err)
		}
		defer cur.Close()
		// The highest log key is the last key before the log's upper bound.
		var k, v []byte
		if _, _, err = cur.Get(kvlog.LogUpper, nil, lmdb.SetRange); err == nil {
			k, v, err = cur.Get(nil, nil, lmdb.Prev)
		} else if lmdb.IsNotFound(err) {
			k, v, err = cur.Get(nil, nil, lmdb.Last)
		}
		switch {
		case lmdb.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("lmdb: recover log keys: %w", err)
		case len(k) == 0 || k[0] != kvlog.LogPrefix:
			return nil
		}
		e, err := kvlog.DecodeEntry(k, v)
		if err != nil {
			return err
		}
		top = e.Key
		k, _, err = cur.Get([]byte{kvlog.LogPrefix}, nil, lmdb.SetRange)
		if err != nil {
			return fmt.Errorf("lmdb: recover log keys: %w", err)
		}
		if first, err := kvlog.KeyOf(k); err == nil && first < floor {
			stale = true
		}
		return nil
	})
	if err == nil {
		err = ctx.Err()
	}
	return top, floor, stale, err
}

// readFloor reads the persisted truncation floor; zero when none was set.
func readFloor(txn *lmdb.Txn, dbi lmdb.DBI) (driver.LogKey, error) {
	v, err := txn.Get(dbi, kvlog.MetaFloor)
	if lmdb.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("lmdb: read truncation floor: %w", err)
	}
	return kvlog.DecodeFloor(v)
}

func (d *db) Name() string                    { return Name }
func (d *db) Granularity() driver.Granularity { return driver.PerRecord }

func (d *db) Submit(ctx context.Context, b *driver.Batch) (*driver.Handle, error) {
	j := newCommitJob(b)
	j.deferred = d.gate.Defer(b)
	h, complete := driver.NewHandle()
	j.complete = complete
	if err := d.enqueue(ctx, j); err != nil {
		return nil, fmt.Errorf("lmdb: submit: %w", err)
	}
	return h, nil
}

// enqueue hands j to the writer, waiting for room while ctx allows; after
// Close it fails with driver.ErrClosed.
func (d *db) enqueue(ctx context.Context, j *job) error { return d.queue.Put(ctx, j) }

func (d *db) Watch(ctx context.Context) <-chan struct{} { return d.notifier.Subscribe(ctx) }

func (d *db) Truncate(ctx context.Context, below driver.LogKey) error {
	// Each round is one bounded write transaction, so a long truncation
	// never holds the writer for long and commits interleave with it.
	for {
		j := &job{trunc: true, below: below, tdone: make(chan struct{})}
		if err := d.enqueue(ctx, j); err != nil {
			return fmt.Errorf("lmdb: truncate: %w", err)
		}
		select {
		case <-j.tdone:
		case <-ctx.Done():
			return fmt.Errorf("lmdb: truncate: %w", ctx.Err())
		}
		if j.err != nil {
			return fmt.Errorf("lmdb: truncate: %w", j.err)
		}
		if !j.more {
			return nil
		}
	}
}

func (d *db) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("lmdb: close: %w", driver.ErrClosed)
	}
	d.closed = true
	d.queue.Close()
	d.mu.Unlock()
	<-d.writerDone
	d.notifier.Close()

	// Reader-slot waiters give up at once; reads holding the guard
	// finish first.
	close(d.done)
	err := d.guard.Close((*snapshot).abortLocked, d.env.Close)
	d.lock.Release()
	if err != nil {
		return fmt.Errorf("lmdb: close: %w", err)
	}
	return nil
}

// isConflict reports a failed check; everything else a job can fail with
// comes from LMDB.
func isConflict(err error) bool { return errors.Is(err, driver.ErrConflict) }
