// Package pebble is Tidemark's embedded default engine, on
// github.com/cockroachdb/pebble/v2. Importing it registers the engine as
// "pebble".
//
// Log keys are per transaction: every entry of one commit carries the same
// hybrid-logical-clock timestamp, assigned under the commit lock so that key
// order, Pebble sequence-number order and visibility order agree.
//
// Durability: with SyncAlways a commit is applied through Pebble's commit
// pipeline without waiting (ApplyNoSyncWait) and its handle completes after
// the WAL sync that covers it, so concurrent submitters share fsyncs (group
// commit); handles complete in commit order. A deferred commit
// (Batch.Defer) is applied without a sync request and completes with the
// next sync, someone else's or, after the defer window, one of its own.
//
// SyncNone and SyncInterval complete a commit once it is in the operating
// system, so a process crash loses none that completed (conformance case
// sigkill_loses_no_completed_commit_sync_none); SyncInterval's periodic
// sync is the only fsync. On Linux their write-ahead log is the engine's
// commit journal (engine parameter journal_kb, 16 MiB by default), and
// Pebble runs without its own: the committer copies the commit's batch
// into a file mapped shared into memory, whose stores the page cache holds
// at once, with no system call and no hand-off to another goroutine; a
// flush of the memtables, started as each half of the journal fills,
// frees the half for reuse (journal.go). With journal_kb=0, on other
// platforms, and where the disk has no room for the journal, Pebble writes
// its WAL: Pebble holds the WAL's last 32 KiB block in memory until it
// fills or a sync is asked for, so a commit is applied with a sync
// request, which has Pebble's WAL writer write it while the WAL file's
// sync does nothing, and the committer waits for that write. Opening the
// store applies the journaled commits its tables lack, whatever the
// parameter and mode.
//
// A commit's data keys are visible to snapshots as soon as it is applied,
// before its sync; its log entries are visible to ScanLog only once the
// commit is durable, so a change feed never shows what a crash could take
// back.
//
// # A full disk
//
// Pebble keeps a failed WAL write's error for good, so at the first
// failing write (seen through the file system the engine gives Pebble)
// the engine refuses commits with engine.ErrWriteFailed, Health reports
// it, and a recovery loop waits until a probe file of a memtable's size
// (at least 4 MiB) can be written and synced in the data directory, then
// closes the failed Pebble DB and opens the directory again; the WAL
// replays as after a crash, and the journal after it. With the journal,
// commits need no write of their own: the first failing write is a
// flush's, and commits are refused from then on. In every sync mode
// nothing completed is lost: a commit whose write failed fails, and one
// the journal holds is applied again. Open snapshots and
// iterators of the failed DB return ErrWriteFailed; read again. If the
// failed DB cannot be closed (a panic inside Pebble's commit pipeline can
// leave it locked), the engine stays failed and Health says to restart
// the process.
//
// # Build
//
// Build with the nopebble tag (go build -tags nopebble) to leave the
// engine and its dependencies out of a binary. A binary built without it
// still registers the name, and engine.Open("pebble") fails with
// engine.ErrUnavailable saying which tag removed it.
package pebble

// Name is the registered engine name.
const Name = "pebble"
