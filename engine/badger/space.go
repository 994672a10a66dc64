//go:build !nobadger

package badger

import (
	"fmt"
	"os"
	"strings"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
	"github.com/tidemark-io/tidemark/engine/internal/space"
)

// Badger writes its memtable WAL, its value log and its tables through
// memory-mapped files it creates sparse: on a file system with no space
// left the kernel cannot back such a write and the process receives
// SIGBUS inside Badger, with no error to recover from. So the engine
// never lets Badger meet a full disk: before each group of commits (and
// each truncation step) it asks a space guard (engine/internal/space)
// whether the group's bytes fit while leaving a reserve free, and refuses
// the group with driver.ErrWriteFailed (wrapping syscall.ENOSPC) when not.
// The reserve is the reserve_mb parameter plus what flushing the current
// memtables will write (the space their WAL files take). From the first
// refusal every commit is refused at once and Health reports it, until
// the reserve plus a MiB is free again and a probe file can be written;
// nothing needs reopening, because Badger never saw a failed write. A
// commit Badger itself fails (a write or sync error it returns) is
// handled the same way.

// defaultReserveMemtables is the default reserve, in memtables: room for
// Badger to flush and compact level 0 while commits are refused.
const defaultReserveMemtables = 4

// commitOverhead is what the engine counts per stored entry beyond its
// key and value, for the space it takes in the WAL or value log.
const commitOverhead = 32

// reserve returns the bytes the guard keeps free: the configured reserve
// plus the space the memtable WAL files take, which their flush writes
// again as tables.
func (d *db) reserve() int64 {
	return d.reserveBytes + d.memtableBytes()
}

// memtableBytes returns the disk space the memtable WAL files (*.mem)
// take. They are sparse, so their size says nothing; their blocks do.
func (d *db) memtableBytes() int64 {
	entries, err := os.ReadDir(d.opts.Dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".mem") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		n += space.Allocated(info)
	}
	return n
}

// groupBytes is what committing ps may take on disk: each entry once in
// the WAL or value log now and once more in a table when its memtable
// flushes.
func groupBytes(ps []*pending) int64 {
	var n int64
	for _, p := range ps {
		n += p.bytes
	}
	return 2 * n
}

// Health reports whether the engine takes commits: nil, or an error
// wrapping driver.ErrWriteFailed that says since when and what to do.
func (d *db) Health() error {
	d.gate.RLock()
	closed := d.closed
	d.gate.RUnlock()
	if closed {
		return fmt.Errorf("badger: %w", driver.ErrClosed)
	}
	return d.space.Health()
}

// admitTruncate asks the guard for a truncation step of n log keys.
func (d *db) admitTruncate(n int) error {
	if err := d.space.Admit(2 * int64(n) * (kvlog.LogKeyLen + commitOverhead)); err != nil {
		return fmt.Errorf("badger: truncate: %w", err)
	}
	return nil
}
