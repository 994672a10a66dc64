// Package lmdb is Tidemark's LMDB engine, on github.com/PowerDNS/lmdb-go
// (cgo, with the LMDB C library compiled in). Importing it registers the
// engine as "lmdb".
//
// # Build
//
// The engine builds whenever cgo is on. Build with the nolmdb tag
// (go build -tags nolmdb) to leave it out, for example for a pure-Go or
// cross-compiled binary; without cgo it is left out as well. A binary built
// without it still registers the name, and engine.Open("lmdb") fails with
// engine.ErrUnavailable saying why and how to get it.
//
// # Layout and log keys
//
// All keys live in LMDB's main database, in the shared layout of
// engine/internal/kvlog: user data under 'd', the change log under 'l',
// engine metadata (the truncation floor) under 'm'. Log keys are per record:
// every entry of a commit gets its own hybrid-logical-clock key, strictly
// increasing within and across commits, so Entry.Index is always 0 and
// Entry.Count always 1. On open the clock is floored at the highest log key
// on disk and the truncation floor, so no key is ever reissued, even after
// a restart with a clock that went backwards.
//
// # Group commit
//
// LMDB admits one write transaction at a time. Submit queues the commit
// (a bounded queue: a full queue blocks Submit, honouring its context) and
// returns at once. One writer goroutine, locked to its OS thread while a
// write transaction is open as LMDB requires (for good under sync=always,
// where that measured faster), drains everything waiting (up to 1024
// commits or 64 MiB) into ONE write transaction, then completes the handles
// in submission order once that transaction committed. Each commit's checks
// are evaluated inside the group transaction before any of its writes, so
// they see the commits queued ahead of it; a commit whose check fails
// writes nothing, completes with engine.ErrConflict, and does not affect
// the others in its group.
//
// # Durability
//
//   - always (default): LMDB's default environment flags. The group's
//     commit returns only after LMDB fdatasync'ed the data pages and then
//     the meta page, so a handle completes only when the commit survives an
//     operating-system crash or power loss (given a disk that honours
//     flushes). One sync pair covers every commit of the group; a group
//     of only deferred commits (Batch.Defer) waits up to the defer window
//     for a commit that is not deferred, and shares its sync pair.
//   - interval: the environment runs with MDB_NOSYNC. A commit completes
//     once LMDB wrote it to the operating system (it survives a process
//     crash), and the writer forces env.Sync every Options.SyncInterval and
//     on Close. An operating-system crash loses at most the commits of the
//     last interval; LMDB keeps the database consistent across it (ACI
//     without D) as long as the filesystem preserves write order.
//   - none: MDB_NOSYNC and no explicit sync; a process crash loses nothing
//     that completed, an operating-system crash may lose anything not yet
//     flushed by the kernel, with the same write-order caveat.
//
// Watch fires after the group's transaction committed (and so after the
// sync under always).
//
// # Map size
//
// LMDB stores the database in one memory map whose size bounds the data.
// The map starts at the map_size_mb parameter and grows when full: a group
// that hits MDB_MAP_FULL is aborted, the writer doubles the map (at least
// enough for the group) with no write transaction active, and the group is
// retried; callers see only a slower commit. LMDB documents
// mdb_env_set_mapsize as safe only while no transaction of the process is
// in use, because remapping moves the map. The engine therefore holds an
// exclusive lock across the resize that every read operation holds shared,
// and no read keeps an LMDB cursor (which caches page pointers) between two
// calls: iterators read in pages and re-seek. Read transactions themselves
// stay open across a resize (LMDB computes page addresses from the map base
// on every access and a read transaction keeps no pointer into the map
// between calls), so a snapshot taken before a resize still reads its view
// after it, and a caller that holds a snapshot while waiting for a commit
// cannot deadlock the writer. The file itself grows only as pages are
// written. On reopen the map starts at map_size_mb or the size of the data
// already stored, whichever is larger.
//
// # Readers
//
// The environment uses MDB_NOTLS (lmdb-go always sets it), so a read
// transaction is tied to its Snapshot rather than to an OS thread and any
// goroutine may use it. Every open read transaction holds one slot of
// LMDB's reader table: each Snapshot until it is closed, and each page of
// ScanLog or LogStats briefly. The table has max_readers slots (default
// 1024); when all are held, Snapshot, ScanLog and LogStats wait for a free
// one, honouring their context. Stale slots of crashed processes are
// reclaimed on open. Long-lived snapshots also keep LMDB from reusing the
// pages they see, so the file grows while they are open; close snapshots
// promptly.
//
// # Close
//
// Close waits for every submitted commit to complete, then aborts the read
// transactions of snapshots still open and closes the environment. Every
// method of the engine, and of snapshots and iterators opened before,
// returns engine.ErrClosed afterwards.
//
// # One process
//
// A directory is opened by one engine at a time: Open takes an exclusive
// lock on a file in it (on Unix) and fails while another engine, in this or
// another process, holds it, because two writers would issue log keys
// independently.
package lmdb

// Name is the registered engine name.
const Name = "lmdb"
