package driver

import "context"

// Engine is what a backend implements. All methods are safe for concurrent
// use. The engine package calls it only through its front, which keeps
// these promises, so a backend need not check them again:
//
//   - Submit receives a batch that passed Batch.Validate, a ctx that had
//     not ended, and is never called concurrently with or after Close.
//   - Snapshot, ScanLog, Truncate and LogStats receive a ctx that had not
//     ended and are not called after Close returned (they may still run
//     concurrently with Close, which must then make them fail with
//     ErrClosed or finish them); Snapshot.Get receives a valid key.
//   - Close is called once.
type Engine interface {
	// Name is the registered driver name.
	Name() string
	// Granularity says how the engine assigns log keys.
	Granularity() Granularity
	// Submit starts an atomic commit and returns at once. A backend may
	// refuse a batch it cannot take (larger than its own limits, or while
	// it cannot write) and may wait for room while its queue is full,
	// giving up with ctx's error; failures at commit time (ErrConflict,
	// I/O) complete the handle with an error. Once Submit returned a
	// handle, cancelling ctx does not withdraw the commit.
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
	// engine. The front calls it once.
	Close() error
}

// SeparateCommits is implemented by engines for which a commit of many
// writes costs more than as many single-write commits submitted together
// (JetStream: a multi-message commit is an atomic batch with a large fixed
// cost on the server, single messages are plain publishes in flight
// together). Callers that may gather independent writes into one commit
// to save per-commit cost (the broker does) should not on such an engine.
// Engines that do not implement it commit many writes at once for less.
type SeparateCommits interface {
	PrefersSeparateCommits() bool
}

// HealthReporter is implemented by engines that know, without writing,
// whether they can take commits now. Health must answer in constant time:
// probes call it on every request.
type HealthReporter interface {
	// Health returns nil while the engine takes commits, and an error
	// wrapping ErrWriteFailed (or ErrClosed) while it refuses them.
	Health() error
}

// CommitLimit is implemented by engines that apply fewer entries in one
// atomic commit than MaxBatchEntries (JetStream on a server whose atomic
// batches are limited: 1000 messages by default). A caller whose commits
// grow with its data (a broker dropping a large session's state) splits
// them by MaxCommitEntries, not by MaxBatchEntries.
type CommitLimit interface {
	// MaxCommitEntries is the most operations, checks and log entries
	// one batch may carry and still commit atomically. It may go down
	// while the engine is open (a server that reports a lower limit),
	// never below 1.
	MaxCommitEntries() int
}

// PointReader is implemented by engines that read one key more cheaply
// than a snapshot can: Get returns what a snapshot opened at its call
// would return for key (the value of the latest commit applied, or
// ErrNotFound), and ErrClosed once the engine closed. A broker's session
// setup reads single keys (a session record, a topic's retained message)
// and has no use for the snapshot around them.
type PointReader interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
}

// Sharer is implemented by engines whose store another engine instance
// can open as another node (JetStream on a shared stream: commit=batch).
type Sharer interface {
	// ClientURL is what another engine passes as its "url" parameter to
	// share this engine's store; empty when this engine must stay the
	// store's only writer.
	ClientURL() string
}
