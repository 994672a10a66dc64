// Package engine is Tidemark's storage-engine contract: an ordered,
// transactional key-value store with an ordered change log, asynchronous
// durable commits, watch and retention. Backends live in engine/<name> and
// register themselves with Register in an init function, the way
// database/sql drivers do; callers open one by name with Open.
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
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// LogKey is a position in the change log. Keys are totally ordered and
// assigned by the engine: a hybrid-logical-clock timestamp on the embedded
// engines, the stream sequence on JetStream. Zero is never assigned and
// means "before the first entry".
type LogKey uint64

// Granularity says how log keys are shared between the entries of one
// commit.
type Granularity uint8

const (
	// PerTransaction engines give every entry of one commit the same key;
	// entries of one key are ordered by Entry.Index. An exclusive scan from
	// K therefore skips the whole commit.
	PerTransaction Granularity = iota + 1
	// PerRecord engines give every entry its own key, increasing within a
	// commit; Entry.Index is always 0 and Entry.Count always 1.
	PerRecord
)

func (g Granularity) String() string {
	switch g {
	case PerTransaction:
		return "per-transaction"
	case PerRecord:
		return "per-record"
	}
	return fmt.Sprintf("Granularity(%d)", uint8(g))
}

// Entry is one change-log entry as a scan returns it.
type Entry struct {
	Key LogKey
	// Index is the entry's position among the entries that carry Key.
	Index uint32
	// Count is the number of entries that carry Key. Index == Count-1
	// marks the last one: after it no entry with this key follows, so a
	// cursor may move to Key.
	Count uint32
	// Value is the entry's payload; the caller owns it.
	Value []byte
}

// Last reports whether no further entry carries e.Key.
func (e Entry) Last() bool { return e.Index+1 >= e.Count }

// Result is what a completed commit reports.
type Result struct {
	// Keys holds the log key of each entry of Batch.Log, in order.
	Keys []LogKey
}

// LogStats describes the retained change log.
type LogStats struct {
	// First and Last are the lowest and highest retained keys; both are
	// zero when the log is empty.
	First, Last LogKey
	// Entries is the number of retained entries.
	Entries uint64
	// Bytes is the (possibly estimated) storage the log takes.
	Bytes uint64
	// Floor is the truncation floor: entries below it were removed.
	Floor LogKey
}

// Snapshot is a consistent read view: it sees every commit that was
// visible when it was taken and none after.
type Snapshot interface {
	// Get returns the value of key, or an error wrapping ErrNotFound.
	Get(ctx context.Context, key []byte) ([]byte, error)
	// Iter iterates keys in [lower, upper) in ascending byte order; a nil
	// upper means no bound.
	Iter(ctx context.Context, lower, upper []byte) (Iterator, error)
	// Close releases the snapshot; iterators must be closed first.
	Close() error
}

// Iterator walks keys in ascending order. Key and Value are valid until the
// next call to Next.
type Iterator interface {
	Next() bool
	Key() []byte
	Value() []byte
	Err() error
	Close() error
}

// Engine is a storage engine. All methods are safe for concurrent use.
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

// PrefersSeparateCommits reports whether e implements SeparateCommits
// and says so.
func PrefersSeparateCommits(e Engine) bool {
	s, ok := e.(SeparateCommits)
	return ok && s.PrefersSeparateCommits()
}

// HealthReporter is implemented by engines that know, without writing,
// whether they can take commits now. Health must answer in constant time:
// probes call it on every request.
type HealthReporter interface {
	// Health returns nil while the engine takes commits, and an error
	// wrapping ErrWriteFailed (or ErrClosed) while it refuses them.
	Health() error
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

// SyncMode says when a commit counts as durable.
type SyncMode uint8

const (
	// SyncAlways completes a handle only after the commit was synced to
	// stable storage. The default.
	SyncAlways SyncMode = iota
	// SyncInterval completes a handle once the commit is written to the
	// operating system; the engine syncs every Options.SyncInterval, so an
	// operating-system crash can lose that much.
	SyncInterval
	// SyncNone never syncs explicitly: a process crash loses nothing
	// written, an operating-system crash can lose anything not yet flushed.
	SyncNone
)

func (m SyncMode) String() string {
	switch m {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", uint8(m))
}

// ParseSyncMode parses "always", "interval" or "none".
func ParseSyncMode(s string) (SyncMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "always":
		return SyncAlways, nil
	case "interval":
		return SyncInterval, nil
	case "none":
		return SyncNone, nil
	}
	return 0, fmt.Errorf("%w: sync mode %q: use always, interval or none", ErrInvalidOption, s)
}

// DefaultSyncInterval is the sync period of SyncInterval when none is set.
const DefaultSyncInterval = 100 * time.Millisecond

// DefaultDeferWindow is how long a deferred commit (Batch.Defer) may wait
// for another commit's sync when Options.DeferWindow is zero: about two
// fsyncs of a disk, so a commit that comes after a round trip of the
// client being served still finds the held sync.
const DefaultDeferWindow = time.Millisecond

// Options configures Open. The zero value (with Dir set) is a synced
// engine on the system clock.
type Options struct {
	// Dir is the engine's data directory; created if missing.
	Dir string
	// Sync is the durability mode; SyncAlways by default.
	Sync SyncMode
	// SyncInterval is the sync period under SyncInterval.
	SyncInterval time.Duration
	// DeferWindow bounds how long a deferred commit (Batch.Defer) waits
	// under SyncAlways for a later commit's sync before the engine syncs
	// it alone; DefaultDeferWindow when zero, never when negative. An
	// engine whose every commit costs a round trip, sync or not, may apply
	// it in every sync mode (the jetstream engine does).
	DeferWindow time.Duration
	// Clock is the wall clock log keys are derived from; time.Now when nil.
	// Tests move it to check that keys stay monotonic across restarts.
	Clock func() time.Time
	// Logger receives the engine's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Params holds engine-specific settings by name (see each driver's
	// Params). Unknown names are an error.
	Params map[string]string
}

// Now returns the options' clock reading.
func (o *Options) Now() time.Time {
	if o.Clock != nil {
		return o.Clock()
	}
	return time.Now()
}

// Log returns the options' logger.
func (o *Options) Log() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// Interval returns the sync period, defaulted.
func (o *Options) Interval() time.Duration {
	if o.SyncInterval > 0 {
		return o.SyncInterval
	}
	return DefaultSyncInterval
}

// Deferral returns how long a deferred commit may wait for a later
// commit's sync, defaulted; zero (always, unless Sync is SyncAlways)
// means commits are never deferred.
func (o *Options) Deferral() time.Duration {
	if o.Sync != SyncAlways {
		return 0
	}
	return o.DeferralAnyMode()
}

// DeferralAnyMode is Deferral in every sync mode, for an engine whose
// commits each cost a round trip (to a server, say) with or without a
// sync: deferring then saves the round trip.
func (o *Options) DeferralAnyMode() time.Duration {
	switch {
	case o.DeferWindow < 0:
		return 0
	case o.DeferWindow == 0:
		return DefaultDeferWindow
	}
	return o.DeferWindow
}

// Commit submits b and waits for its durable completion.
func Commit(ctx context.Context, e Engine, b *Batch) (Result, error) {
	h, err := e.Submit(ctx, b)
	if err != nil {
		return Result{}, err
	}
	return h.Wait(ctx)
}

// Get reads one key from a fresh snapshot.
func Get(ctx context.Context, e Engine, key []byte) ([]byte, error) {
	s, err := e.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Get(ctx, key)
}
