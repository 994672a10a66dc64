// Package engine is Tidemark's storage-engine API: an ordered,
// transactional key-value store with an ordered change log, asynchronous
// durable commits, watch and retention. Callers open an engine by name
// with Open, the way database/sql opens a database; backends live in
// engine/<name>, implement the contract of engine/driver and register
// there in an init function, so a program picks its engines by importing
// them.
//
// Every Engine Open returns keeps the contract described in engine/driver:
// atomic batches, submission-ordered log keys that are never reissued,
// handles that complete when the commit is durable under the SyncMode,
// Watch signals only after durability, and errors that wrap the sentinels
// below. The checks every backend would otherwise repeat (batch limits,
// key validity, a cancelled ctx, use after Close) are made once here,
// before a backend sees the call.
package engine

import (
	"context"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// The vocabulary callers and backends share is defined in engine/driver
// and re-exported here under the same names, so callers import engine
// alone.
type (
	// LogKey is a position in the change log (see driver.LogKey).
	LogKey = driver.LogKey
	// Granularity says how log keys are shared between the entries of
	// one commit (see driver.Granularity).
	Granularity = driver.Granularity
	// Entry is one change-log entry as a scan returns it.
	Entry = driver.Entry
	// Result is what a completed commit reports.
	Result = driver.Result
	// LogStats describes the retained change log.
	LogStats = driver.LogStats
	// Snapshot is a consistent read view (see driver.Snapshot).
	Snapshot = driver.Snapshot
	// Iterator walks a snapshot's keys in ascending order.
	Iterator = driver.Iterator
	// Batch is one atomic commit (see driver.Batch).
	Batch = driver.Batch
	// Op is one write of a Batch.
	Op = driver.Op
	// OpKind says what an Op does.
	OpKind = driver.OpKind
	// Check is a precondition of a Batch.
	Check = driver.Check
	// Handle is the completion of one submitted commit.
	Handle = driver.Handle
	// SyncMode says when a commit counts as durable.
	SyncMode = driver.SyncMode
	// Options configures Open (see driver.Options).
	Options = driver.Options
	// Param documents one engine-specific option of Options.Params.
	Param = driver.Param
	// SeparateCommits is implemented by engines that commit many writes
	// for more as one commit than as many (see driver.SeparateCommits).
	SeparateCommits = driver.SeparateCommits
	// HealthReporter is implemented by engines that know, without
	// writing, whether they take commits now.
	HealthReporter = driver.HealthReporter
	// CommitLimit is implemented by engines that apply fewer entries in
	// one commit than MaxBatchEntries.
	CommitLimit = driver.CommitLimit
	// PointReader is implemented by engines that read one key without
	// a snapshot (see driver.PointReader); Get uses it when there.
	PointReader = driver.PointReader
	// Sharer is implemented by engines whose store another engine can
	// open as another node (see driver.Sharer).
	Sharer = driver.Sharer
)

// Granularities, op kinds and sync modes; see engine/driver.
const (
	PerTransaction = driver.PerTransaction
	PerRecord      = driver.PerRecord
	OpPut          = driver.OpPut
	OpDelete       = driver.OpDelete
	SyncAlways     = driver.SyncAlways
	SyncInterval   = driver.SyncInterval
	SyncNone       = driver.SyncNone
)

// Limits every engine accepts, and option defaults; see engine/driver.
const (
	MaxKeySize          = driver.MaxKeySize
	MaxValueSize        = driver.MaxValueSize
	MaxBatchEntries     = driver.MaxBatchEntries
	MaxBatchBytes       = driver.MaxBatchBytes
	DefaultSyncInterval = driver.DefaultSyncInterval
	DefaultDeferWindow  = driver.DefaultDeferWindow
)

// Sentinel errors every engine error wraps; test them with errors.Is.
// Their meanings are documented in engine/driver.
var (
	ErrNotFound      = driver.ErrNotFound
	ErrConflict      = driver.ErrConflict
	ErrClosed        = driver.ErrClosed
	ErrInvalidKey    = driver.ErrInvalidKey
	ErrKeyTooLarge   = driver.ErrKeyTooLarge
	ErrValueTooLarge = driver.ErrValueTooLarge
	ErrBatchTooLarge = driver.ErrBatchTooLarge
	ErrEmptyBatch    = driver.ErrEmptyBatch
	ErrLogTruncated  = driver.ErrLogTruncated
	ErrUnknownEngine = driver.ErrUnknownEngine
	ErrUnavailable   = driver.ErrUnavailable
	ErrInvalidOption = driver.ErrInvalidOption
	ErrCorrupt       = driver.ErrCorrupt
	ErrInUse         = driver.ErrInUse
	ErrWriteFailed   = driver.ErrWriteFailed
)

// ParseSyncMode parses "always", "interval" or "none"; anything else is
// an error wrapping ErrInvalidOption.
func ParseSyncMode(s string) (SyncMode, error) { return driver.ParseSyncMode(s) }

// ValidKey reports whether key may be read or written: non-empty and at
// most MaxKeySize bytes; otherwise an error wrapping ErrInvalidKey or
// ErrKeyTooLarge.
func ValidKey(key []byte) error { return driver.ValidKey(key) }

// Engine is an open storage engine, as Open returns it: a backend behind
// the front that checks arguments, ctx and Close for it. All methods are
// safe for concurrent use.
type Engine interface {
	// Name is the registered driver name.
	Name() string
	// Granularity says how the engine assigns log keys.
	Granularity() Granularity
	// Submit starts an atomic commit and returns at once. An invalid batch,
	// a closed engine or a cancelled ctx is reported here and nothing is
	// applied; failures at commit time (ErrConflict, I/O) complete the
	// handle with an error. Once Submit returned a handle, cancelling ctx
	// does not withdraw the commit.
	Submit(ctx context.Context, b *Batch) (*Handle, error)
	// Snapshot opens a consistent read view.
	Snapshot(ctx context.Context) (Snapshot, error)
	// ScanLog calls fn for each entry from key from (exclusive skips every
	// entry carrying from) in log order until fn returns false or the log
	// ends. It reads live: entries committed during the scan may or may not
	// be seen, but never out of order. A start below the truncation floor
	// returns ErrLogTruncated before calling fn.
	ScanLog(ctx context.Context, from LogKey, exclusive bool, fn func(Entry) bool) error
	// Watch returns a channel that receives a (coalesced) signal after new
	// log entries became durable, including commits by other processes
	// where the engine is shared. It is closed when ctx ends or the engine
	// closes.
	Watch(ctx context.Context) <-chan struct{}
	// Truncate removes log entries with keys below below and raises the
	// truncation floor; data keys are not touched.
	Truncate(ctx context.Context, below LogKey) error
	// LogStats describes the retained log.
	LogStats(ctx context.Context) (LogStats, error)
	// Close waits for submitted commits to complete and releases the
	// engine. Later calls return ErrClosed.
	Close() error
}

// PrefersSeparateCommits reports whether e implements SeparateCommits
// and says so.
func PrefersSeparateCommits(e Engine) bool {
	s, ok := e.(SeparateCommits)
	return ok && s.PrefersSeparateCommits()
}

// Health reports whether e takes commits now: e's own Health where it
// implements HealthReporter, nil otherwise (such an engine reports write
// failures on the commits alone).
func Health(e Engine) error {
	if h, ok := e.(HealthReporter); ok {
		return h.Health()
	}
	return nil
}

// MaxCommitEntries returns the most entries (operations, checks and log
// entries) one batch may carry on e: MaxBatchEntries, or less when e
// implements CommitLimit and says so. A batch within it and within the
// other limits is never refused for its size.
func MaxCommitEntries(e Engine) int {
	if l, ok := e.(CommitLimit); ok {
		return max(1, min(MaxBatchEntries, l.MaxCommitEntries()))
	}
	return MaxBatchEntries
}

// Commit submits b and waits for its durable completion.
func Commit(ctx context.Context, e Engine, b *Batch) (Result, error) {
	h, err := e.Submit(ctx, b)
	if err != nil {
		return Result{}, err
	}
	return h.Wait(ctx)
}

// Get reads one key as a fresh snapshot would: without one when e is a
// PointReader.
func Get(ctx context.Context, e Engine, key []byte) ([]byte, error) {
	if p, ok := e.(PointReader); ok {
		return p.Get(ctx, key)
	}
	return snapshotGet(ctx, e, key)
}

// snapshotGet reads one key from a fresh snapshot.
func snapshotGet(ctx context.Context, e Engine, key []byte) ([]byte, error) {
	s, err := e.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Get(ctx, key)
}
