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
// SyncInterval applies without
// sync and syncs the WAL every interval; SyncNone never syncs explicitly.
// A commit's data keys are visible to snapshots as soon as it is applied,
// before its sync; its log entries are visible to ScanLog only once the
// commit is durable, so a change feed never shows what a crash could take
// back.
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
