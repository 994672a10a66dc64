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
// committing in order, Badger's own timestamp bookkeeping is only cost.
// The queue is the engines' shared one (engine/internal/group); badger's
// gather rule: when fewer commits arrived since the last group completed
// than that group held, the writer waits a little (at most 250µs, and at
// most half the last group's commit time) for the rest, so closed-loop
// submitters do not split into two groups and pay two syncs.
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
//   - reserve_mb (default 4 x memtable_mb, 0 to 1048576): free space in
//     MiB that commits leave on the data directory's file system for
//     Badger's flushes and compactions (see A full disk).
//
// Memory: an open engine holds a memtable arena of about 1.3 x memtable_mb
// (Badger sizes it to take one full transaction on top of the memtable),
// up to two more while flushes are pending, and the block cache.
//
// Value-log space freed by deletes and truncation is reclaimed by a
// background value-log garbage collection every few minutes.
//
// # A full disk
//
// Badger writes its memtable WAL, value log and tables through
// memory-mapped files it creates sparse; on a file system with no space
// left the kernel cannot back such a write, and the process receives
// SIGBUS inside Badger, with no error to recover from. So Badger must
// never meet a full disk: before each group of commits, and each step of
// a truncation, the engine checks the file system's free space (statfs,
// measured again at least every 20ms and whenever the admitted bytes
// could pass it) and refuses the group when its bytes (counted twice:
// once in the WAL or value log, once in the table its memtable flushes
// to) would leave less free than the reserve. The reserve is reserve_mb
// plus the space the memtable WAL files take (what flushing them writes).
// Refused commits complete with engine.ErrWriteFailed wrapping
// syscall.ENOSPC; from the first refusal every commit is refused at once
// and Health reports it. The engine recovers by itself: once the reserve
// plus 1 MiB is free and a probe file of 1 MiB can be written and synced
// in the data directory, commits are taken again. Nothing needs reopening,
// since Badger never saw a failed write, and nothing acknowledged is
// lost. A commit that Badger itself fails (an I/O error it returns) is
// reported and recovered from the same way. Value-log garbage collection
// skips its rounds while a value-log file's worth beyond the reserve is
// not free.
//
// What the reserve does not cover ends the process as before: Badger's
// background work writing more than the reserve while the disk is full
// (a compaction of deeper levels, which can write several tables of up to
// tens of MiB each before it frees their inputs), or another process taking
// the reserve. Nothing acknowledged is lost then either (the WAL up to
// the last synced write replays at the next open). Give Badger a file
// system of its own, or a reserve_mb sized to its largest compactions.
//
// # Build
//
// Build with the nobadger tag (go build -tags nobadger) to leave the
// engine and its dependencies out of a binary. A binary built without it
// still registers the name, and engine.Open("badger") fails with
// engine.ErrUnavailable saying which tag removed it.
package badger

// Name is the registered engine name.
const Name = "badger"
