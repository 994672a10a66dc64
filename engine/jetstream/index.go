//go:build !nojetstream

package jetstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/pebble/localkv"
)

// The index (see the package doc, "Reads") is a localkv store on local
// disk, in a directory of its own that nothing outlives the engine: it is
// rebuilt from the stream at every open, so it needs no write-ahead log
// and no sync, and it holds in memory only a block cache and memtables,
// whatever the number of keys.
const (
	// defaultIndexCacheMB is the index's block cache unless the
	// index_cache_mb parameter says otherwise. Under a QoS 2 load of 50
	// connections, 8 MiB with 4 MiB memtables sent most index reads to
	// the files (a system call per block): 45-55 against 60-73 µs of
	// broker CPU per message with 64 MiB and 16 MiB.
	defaultIndexCacheMB = 64
	// indexMemTableBytes is the size of one memtable; Pebble keeps at
	// most a few of them while it flushes.
	indexMemTableBytes = 16 << 20
	// indexDirPrefix names the index directories under the data
	// directory (or the system's temporary directory without one).
	indexDirPrefix = "jetstream-index-"
)

// Key prefixes in the index store.
const (
	// prefixRecord + user key -> the key's record (encodeVersion).
	prefixRecord = 'd'
	// prefixPresent + user key -> empty: the key's subject holds a value
	// rather than a delete marker or nothing (commit=wal; see
	// materializer), so a delete must be copied there.
	prefixPresent = 'p'
)

// version is the latest message of one data subject: the value it stored
// (or a delete marker) and its stream sequence, which a commit that checks
// the key sends as its expected last subject sequence.
type version struct {
	seq     uint64
	val     []byte
	deleted bool
}

// errBadRecord reports an undecodable index record.
var errBadRecord = errors.New("jetstream: undecodable index record")

// recordKey returns the index key of user key.
func recordKey(key string) []byte {
	return append([]byte{prefixRecord}, key...)
}

func presentKey(key string) []byte {
	return append([]byte{prefixPresent}, key...)
}

// encodeVersion encodes a record: the sequence (8 bytes, big endian), a
// flag byte (1: deleted), then the value.
func encodeVersion(v version) []byte {
	b := make([]byte, 9, 9+len(v.val))
	binary.BigEndian.PutUint64(b, v.seq)
	if v.deleted {
		b[8] = 1
	}
	return append(b, v.val...)
}

// decodeVersion decodes a record; its value aliases b.
func decodeVersion(b []byte) (version, error) {
	if len(b) < 9 || b[8] > 1 {
		return version{}, errBadRecord
	}
	return version{seq: binary.BigEndian.Uint64(b), deleted: b[8] == 1, val: b[9:]}, nil
}

// store is the index: records of the keys the index applied, in key order.
// Readers go through snapshots (read.go); mu keeps close from pulling the
// store from under them.
type store struct {
	dir  string
	lock *dirlock.Lock
	db   *localkv.DB

	mu     sync.RWMutex
	closed bool
	snaps  map[*snapshot]struct{}
}

// openStore makes a new, empty index in a directory of its own under base
// (the system's temporary directory when empty), after removing the index
// directories there that no open engine holds (left by a crash).
func openStore(base string, cacheBytes int64, log *slog.Logger) (*store, error) {
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("jetstream: index directory: %w", err)
	}
	removeStaleIndexes(base, log)
	dir, err := os.MkdirTemp(base, indexDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("jetstream: index directory: %w", err)
	}
	lock, err := dirlock.Take(Name, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// Checks read keys that are often absent (a free staging slot).
	db, err := localkv.Open(filepath.Join(dir, "db"), localkv.Options{
		CacheBytes: cacheBytes, MemTableBytes: indexMemTableBytes, BloomFilters: true, Logger: log,
	})
	if err != nil {
		lock.Release()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("jetstream: open index in %s: %w", dir, err)
	}
	return &store{dir: dir, lock: lock, db: db, snaps: map[*snapshot]struct{}{}}, nil
}

// removeStaleIndexes removes the index directories under base whose lock
// nobody holds: their engine is gone.
func removeStaleIndexes(base string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(base, indexDirPrefix+"*"))
	for _, dir := range dirs {
		lock, err := dirlock.Take(Name, dir)
		if err != nil {
			continue // in use, or not ours to judge
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("removing a stale index directory", "dir", dir, "err", err)
		}
		lock.Release()
	}
}

// close closes every snapshot still open, then the store, and removes its
// directory. Nothing may write to the store once close began.
func (s *store) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for sn := range s.snaps {
		sn.closeLocked()
	}
	_ = s.db.Close() // its directory goes next: nothing in it matters
	_ = os.RemoveAll(s.dir)
	s.lock.Release()
}

// memtableBytes returns the memory the index's memtables take, which
// flushing them writes to its disk again.
func (s *store) memtableBytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0
	}
	return s.db.MemTableBytes()
}

// lookup returns the record of key in r (the store or one of its
// snapshots); the value is the caller's.
func lookup(r localkv.Reader, key string) (version, bool, error) {
	b, ok, err := r.Get(recordKey(key))
	if err != nil {
		return version{}, false, fmt.Errorf("jetstream: index: get %q: %w", key, err)
	}
	if !ok {
		return version{}, false, nil
	}
	v, err := decodeVersion(b)
	if err != nil {
		return version{}, false, fmt.Errorf("%w: key %q", err, key)
	}
	return v, true, nil
}

// get returns the record of key as the index stands now.
func (s *store) get(key string) (version, bool, error) {
	return lookup(s.db, key)
}

// present reports whether key's subject holds a value (commit=wal).
func (s *store) present(key string) (bool, error) {
	_, ok, err := s.db.Get(presentKey(key))
	if err != nil {
		return false, fmt.Errorf("jetstream: index: %w", err)
	}
	return ok, nil
}

// setPresent records whether key's subject holds a value (commit=wal).
func (s *store) setPresent(key string, on bool) error {
	var err error
	if on {
		err = s.db.Set(presentKey(key), nil)
	} else {
		err = s.db.Delete(presentKey(key))
	}
	if err != nil {
		return fmt.Errorf("jetstream: index: %w", err)
	}
	return nil
}
