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
// SyncNone and SyncInterval apply every commit with a sync request too,
// and the committer waits for it, but the WAL file's sync does nothing in
// those modes (SyncInterval's periodic sync excepted): the request has
// Pebble's WAL writer write the commit to the file, which without one it
// does only once a 32 KiB block fills, so a commit completes once it is in
// the operating system and a process crash loses none that completed
// (conformance case sigkill_loses_no_completed_commit_sync_none). The
// committer's wait for that write costs a hand-off to the WAL writer's
// goroutine per commit, or per group of concurrent ones. A commit's data keys are visible to snapshots as soon as it is applied,
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
// replays as after a crash. In every sync mode nothing completed is lost:
// a commit whose write failed fails. Open snapshots and
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
