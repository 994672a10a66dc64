package driver

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
	// Value is the entry's payload. The caller may keep it and must not
	// modify it: a backend may hand the same bytes to other scans.
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
	// SyncNone never syncs explicitly, but completes a handle only once
	// the commit is written to the operating system: a process crash
	// loses no completed commit, an operating-system crash can lose
	// anything not yet flushed.
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

// logicalBits is the width of the logical counter in an HLC log key: the
// high 48 bits hold Unix milliseconds, the low 16 a counter that orders
// keys issued within one millisecond (internal/hlc issues them).
const logicalBits = 16

// Time returns the wall time an HLC key was issued at, to the millisecond.
// It means nothing for keys that are not HLC timestamps (JetStream's
// stream sequences).
func (k LogKey) Time() time.Time {
	return time.UnixMilli(int64(uint64(k) >> logicalBits))
}
