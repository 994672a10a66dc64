// Package localkv is a key-value store on local disk, built on Pebble, for
// data that is rebuilt from elsewhere at every open: an index or a cache
// of a store that is durable on its own. It writes no write-ahead log and
// never syncs, so nothing in it survives a crash, and it holds in memory
// only Pebble's block cache and memtables, whatever the number of keys.
//
// It lets another engine keep such data on disk without importing Pebble
// itself; it is not an engine and keeps none of the engine contract.
package localkv

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options sizes a store.
type Options struct {
	// CacheBytes is the block cache (8 MiB when 0).
	CacheBytes int64
	// MemTableBytes is one memtable (4 MiB when 0); Pebble keeps at most a
	// few while it flushes.
	MemTableBytes uint64
	// BloomFilters adds bloom filters to the tables, for reads of keys
	// that are often absent.
	BloomFilters bool
	// Logger receives Pebble's errors (info goes to debug level).
	Logger *slog.Logger
}

// DB is an open store. Its methods are safe for concurrent use; it must
// not be used after Close.
type DB struct {
	db    *pebble.DB
	cache *pebble.Cache
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	if o.CacheBytes == 0 {
		o.CacheBytes = 8 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 4 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cache := pebble.NewCache(o.CacheBytes)
	popts := &pebble.Options{
		// vfs.Default, not DefaultOptions().FS: that one checks disk
		// health with a goroutine only its discarded closer stops.
		FS:           noSyncFS{vfs.Default},
		Cache:        cache,
		MemTableSize: o.MemTableBytes,
		DisableWAL:   true,
		Logger:       logger{o.Logger},
	}
	if o.BloomFilters {
		popts.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	}
	pdb, err := pebble.Open(dir, popts)
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("localkv: open %s: %w", dir, err)
	}
	return &DB{db: pdb, cache: cache}, nil
}

// Close closes the store; what it holds stays on disk for the caller to
// remove or reopen.
func (d *DB) Close() error {
	err := d.db.Close()
	d.cache.Unref()
	return err
}

// MemTableBytes returns the memory the store's memtables take, which
// flushing them writes to disk.
func (d *DB) MemTableBytes() int64 {
	return int64(d.db.Metrics().MemTable.Size) //nolint:gosec // a memory size fits int64
}

// Reader reads point values: a DB or a Snapshot.
type Reader interface {
	// Get returns a copy of key's value and whether the key exists.
	Get(key []byte) ([]byte, bool, error)
}

// Get returns a copy of key's value and whether the key exists.
func (d *DB) Get(key []byte) ([]byte, bool, error) { return get(d.db, key) }

// Set writes key.
func (d *DB) Set(key, value []byte) error { return wrap(d.db.Set(key, value, pebble.NoSync)) }

// Delete removes key.
func (d *DB) Delete(key []byte) error { return wrap(d.db.Delete(key, pebble.NoSync)) }

// NewBatch returns an empty batch of writes that Commit applies at once:
// a snapshot sees all of a committed batch or none of it.
func (d *DB) NewBatch() *Batch { return &Batch{b: d.db.NewBatch()} }

// NewSnapshot returns a consistent view of the store as it is now. It
// must be closed before the store.
func (d *DB) NewSnapshot() *Snapshot { return &Snapshot{s: d.db.NewSnapshot()} }

// NewIter returns an iterator over [lower, upper) of the store as it is
// now (nil bounds are open).
func (d *DB) NewIter(lower, upper []byte) (*Iterator, error) {
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, wrap(err)
	}
	return &Iterator{it: it}, nil
}

// Batch gathers writes for one atomic Commit. It is not safe for
// concurrent use.
type Batch struct{ b *pebble.Batch }

// Set adds a write of key.
func (b *Batch) Set(key, value []byte) { _ = b.b.Set(key, value, nil) }

// Delete adds a removal of key.
func (b *Batch) Delete(key []byte) { _ = b.b.Delete(key, nil) }

// Empty reports whether the batch holds no write.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Commit applies the batch's writes at once. The batch is spent
// afterwards: Close it.
func (b *Batch) Commit() error { return wrap(b.b.Commit(pebble.NoSync)) }

// Close releases the batch.
func (b *Batch) Close() { _ = b.b.Close() }

// Snapshot is a consistent view of the store at one moment.
type Snapshot struct{ s *pebble.Snapshot }

// Get returns a copy of key's value in the snapshot and whether it exists.
func (s *Snapshot) Get(key []byte) ([]byte, bool, error) { return get(s.s, key) }

// NewIter returns an iterator over [lower, upper) of the snapshot (nil
// bounds are open). It must be closed before the snapshot.
func (s *Snapshot) NewIter(lower, upper []byte) (*Iterator, error) {
	it, err := s.s.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, wrap(err)
	}
	return &Iterator{it: it}, nil
}

// Close releases the snapshot.
func (s *Snapshot) Close() error { return wrap(s.s.Close()) }

// Iterator walks keys in order. Key and Value are valid until the next
// move; it is not safe for concurrent use.
type Iterator struct{ it *pebble.Iterator }

// First moves to the first key and reports whether there is one.
func (i *Iterator) First() bool { return i.it.First() }

// Next moves to the next key and reports whether there is one.
func (i *Iterator) Next() bool { return i.it.Next() }

// Key returns the current key.
func (i *Iterator) Key() []byte { return i.it.Key() }

// Value returns the current value.
func (i *Iterator) Value() []byte { return i.it.Value() }

// Error returns the error that ended the walk, if any.
func (i *Iterator) Error() error { return wrap(i.it.Error()) }

// Close releases the iterator.
func (i *Iterator) Close() error { return wrap(i.it.Close()) }

func get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrap(err)
	}
	out := append([]byte(nil), v...)
	_ = closer.Close()
	return out, true, nil
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("localkv: %w", err)
}

// logger routes Pebble's logs to slog; its info chatter goes to debug.
type logger struct{ l *slog.Logger }

func (l logger) Infof(format string, args ...any)  { l.l.Debug(fmt.Sprintf(format, args...)) }
func (l logger) Errorf(format string, args ...any) { l.l.Error(fmt.Sprintf(format, args...)) }

// Fatalf is called by Pebble on a state it cannot go on from, and must
// not return.
func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error("localkv: pebble fatal error", "err", msg)
	panic("localkv: " + msg)
}
