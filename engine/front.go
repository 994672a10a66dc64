package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// front is the Engine Open returns: it makes the checks every backend
// would otherwise repeat, once, before a call reaches the backend, and so
// keeps the promises driver.Engine lists.
//
// gate orders Submit against Close: Submit calls the backend under its
// read lock, Close marks the front closed under its write lock before it
// calls the backend's Close, so a backend never sees a Submit during or
// after its Close. Reads only test closed: they may still race with
// Close, which the backend resolves (ErrClosed or finishing them).
type front struct {
	e      driver.Engine
	name   string
	gate   sync.RWMutex
	closed atomic.Bool
}

func newFront(e driver.Engine) *front { return &front{e: e, name: e.Name()} }

func (f *front) errf(op string, err error) error {
	return fmt.Errorf("%s: %s: %w", f.name, op, err)
}

// check reports a ctx that ended or a closed engine.
func (f *front) check(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return f.errf(op, err)
	}
	if f.closed.Load() {
		return f.errf(op, ErrClosed)
	}
	return nil
}

func (f *front) Name() string             { return f.name }
func (f *front) Granularity() Granularity { return f.e.Granularity() }

func (f *front) Submit(ctx context.Context, b *Batch) (*Handle, error) {
	if err := b.Validate(); err != nil {
		return nil, f.errf("submit", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, f.errf("submit", err)
	}
	f.gate.RLock()
	defer f.gate.RUnlock()
	if f.closed.Load() {
		return nil, f.errf("submit", ErrClosed)
	}
	return f.e.Submit(ctx, b)
}

func (f *front) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := f.check(ctx, "snapshot"); err != nil {
		return nil, err
	}
	s, err := f.e.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return &frontSnapshot{s: s, name: f.name}, nil
}

// Get reads key without a snapshot on a backend that can (a
// driver.PointReader), and from a fresh snapshot on one that cannot.
func (f *front) Get(ctx context.Context, key []byte) ([]byte, error) {
	p, ok := f.e.(driver.PointReader)
	if !ok {
		return snapshotGet(ctx, f, key)
	}
	if err := ValidKey(key); err != nil {
		return nil, f.errf("get", err)
	}
	if err := f.check(ctx, "get"); err != nil {
		return nil, err
	}
	return p.Get(ctx, key)
}

func (f *front) ScanLog(ctx context.Context, from LogKey, exclusive bool, fn func(Entry) bool) error {
	if err := f.check(ctx, "scan log"); err != nil {
		return err
	}
	return f.e.ScanLog(ctx, from, exclusive, fn)
}

func (f *front) Watch(ctx context.Context) <-chan struct{} { return f.e.Watch(ctx) }

func (f *front) Truncate(ctx context.Context, below LogKey) error {
	if err := f.check(ctx, "truncate"); err != nil {
		return err
	}
	return f.e.Truncate(ctx, below)
}

func (f *front) LogStats(ctx context.Context) (LogStats, error) {
	if err := f.check(ctx, "log stats"); err != nil {
		return LogStats{}, err
	}
	return f.e.LogStats(ctx)
}

func (f *front) Close() error {
	f.gate.Lock()
	if f.closed.Load() {
		f.gate.Unlock()
		return f.errf("close", ErrClosed)
	}
	f.closed.Store(true)
	f.gate.Unlock()
	return f.e.Close()
}

// PrefersSeparateCommits passes the backend's answer on (SeparateCommits).
func (f *front) PrefersSeparateCommits() bool {
	s, ok := f.e.(SeparateCommits)
	return ok && s.PrefersSeparateCommits()
}

// Health passes the backend's answer on (HealthReporter): ErrClosed after
// Close, nil from a backend that does not report health.
func (f *front) Health() error {
	if f.closed.Load() {
		return f.errf("health", ErrClosed)
	}
	if h, ok := f.e.(HealthReporter); ok {
		return h.Health()
	}
	return nil
}

// MaxCommitEntries passes the backend's limit on (CommitLimit), bounded
// by MaxBatchEntries and at least 1.
func (f *front) MaxCommitEntries() int {
	if l, ok := f.e.(CommitLimit); ok {
		return max(1, min(MaxBatchEntries, l.MaxCommitEntries()))
	}
	return MaxBatchEntries
}

// ClientURL passes the backend's answer on (Sharer): empty from a
// backend whose store no other engine may open. Without it the front
// would hide a shared store, and callers that open a second node on it
// (the conformance suite's cross-node cases) would quietly use one.
func (f *front) ClientURL() string {
	if s, ok := f.e.(Sharer); ok {
		return s.ClientURL()
	}
	return ""
}

// frontSnapshot validates keys and checks ctx before a read reaches the
// backend's snapshot.
type frontSnapshot struct {
	s    driver.Snapshot
	name string
}

func (s *frontSnapshot) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return nil, fmt.Errorf("%s: get: %w", s.name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: get: %w", s.name, err)
	}
	return s.s.Get(ctx, key)
}

func (s *frontSnapshot) Iter(ctx context.Context, lower, upper []byte) (Iterator, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: iter: %w", s.name, err)
	}
	return s.s.Iter(ctx, lower, upper)
}

func (s *frontSnapshot) Close() error { return s.s.Close() }
