// Package driver is the contract Tidemark's storage backends implement,
// the way database/sql/driver is for database/sql: the Engine interface
// and its optional extensions, Register, and the vocabulary both sides
// share (Batch, LogKey, Handle, Options, the error sentinels). The engine
// package re-exports that vocabulary, so callers import engine alone and
// never this package.
//
// A backend lives in engine/<name>, implements Engine and registers a
// Driver under its name in an init function. The engine package wraps
// every opened Engine in a front that validates batches and keys, checks
// ctx and refuses calls after Close once for every backend (Engine's doc
// lists what a backend may therefore assume), so backends implement only
// what differs between them. Machinery several backends share lives in
// engine/internal: the group-commit queue (group), the snapshot guard
// (snapguard), deferral, the space guard, the data-directory lock and the
// stored key layout.
//
// The contract every backend keeps:
//
//   - A Batch is atomic: all its checks hold and all its ops and log
//     entries apply, or none do.
//   - Submit returns at once with a Handle; the handle completes when the
//     commit is durable under the engine's SyncMode. If commit A's Submit
//     returned before commit B's Submit was called, A's log keys are lower
//     than B's, A is visible to readers no later than B, and A's handle
//     completes no later than B's.
//   - Log keys are assigned by the engine, strictly increasing in commit
//     order, and never reissued, even after a restart with a clock that went
//     backwards. Granularity says whether all entries of one commit share a
//     key or each gets its own.
//   - A reader that sees log key K sees every commit with a lower key.
//   - Watch fires only after the commits it announces are durable.
//   - No input makes an engine panic; every error wraps one of the
//     sentinels in errors.go.
package driver
