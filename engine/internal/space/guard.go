package space

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

const (
	// refreshEvery bounds how long a measurement of the free space is
	// trusted: the library's own background writes (flushes,
	// compactions, a server's state files) and other processes use space
	// the admitted bytes do not count.
	refreshEvery = 20 * time.Millisecond
	// Slack is the free space, beyond the reserve, a guard waits for
	// before it lifts a refusal, so it does not flap at the threshold;
	// the recovery probe writes as much.
	Slack      = 1 << 20
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

// Guard refuses writes that would leave less than a reserve free on a
// directory's file system, and keeps refusing, for Health to report,
// until the reserve plus Slack is free again and a probe file of Slack
// bytes can be written and synced there. It is safe for concurrent use.
type Guard struct {
	name, dir string
	reserve   func() int64
	log       *slog.Logger

	mu      sync.Mutex
	budget  int64     // bytes still admitted before the next measurement
	checked time.Time // when budget was measured; zero: measure now
	// wanted is the free space the last measurement waited for, for
	// Health to say without measuring.
	wanted atomic.Int64

	failure atomic.Pointer[failure]
	// reopen, when set, runs once space returned and before the refusal
	// lifts: what the engine must redo after a failed write.
	reopen func() error

	recMu   sync.Mutex
	closed  bool
	stop    chan struct{}
	running sync.WaitGroup
}

// failure is why a guard refuses writes, and since when.
type failure struct {
	err   error
	since time.Time
}

// NewGuard returns a guard for dir, on behalf of the engine called name
// (for messages). reserve returns the bytes that must stay free; it is
// called at every measurement, so it may follow what the engine's
// library will still write by itself (a memtable to flush).
func NewGuard(name, dir string, reserve func() int64, log *slog.Logger) *Guard {
	return &Guard{name: name, dir: dir, reserve: reserve, log: log, stop: make(chan struct{})}
}

// OnSpace sets fn to run when space returned, before the refusal lifts;
// while it fails the guard keeps refusing and tries again later. Set it
// before the first Admit.
func (g *Guard) OnSpace(fn func() error) { g.reopen = fn }

// Admit returns nil when n more bytes may be written, and otherwise an
// error wrapping driver.ErrWriteFailed and syscall.ENOSPC; from then on
// every call returns it at once until space returns (see Guard).
func (g *Guard) Admit(n int64) error {
	if f := g.failure.Load(); f != nil {
		return f.err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.budget < n || now.Sub(g.checked) > refreshEvery {
		free, err := Free(g.dir)
		if err != nil {
			// Unmeasurable is not full: the writes themselves will say.
			g.log.Debug("measuring free space", "err", err)
			return nil
		}
		reserve := g.reserve()
		g.wanted.Store(reserve + Slack)
		g.budget, g.checked = free-reserve, now
		if g.budget < n {
			return g.Fail(fmt.Errorf("%s: %w: %w: %d bytes free in %s, the engine keeps %d free (reserve) and needed %d more",
				g.name, driver.ErrWriteFailed, syscall.ENOSPC, free, g.dir, reserve, n))
		}
	}
	g.budget -= n
	return nil
}

// Has reports whether n bytes beyond the reserve are free now, without
// refusing anything: for a library's optional work (a garbage collection
// that rewrites before it frees) that must not eat the reserve.
func (g *Guard) Has(n int64) bool {
	if g.failure.Load() != nil {
		return false
	}
	free, err := Free(g.dir)
	return err != nil || free-g.reserve() >= n
}

// Fail records err, a write that failed (it should wrap
// driver.ErrWriteFailed), starts waiting for space, and returns err. The
// first failure stands until recovery; later ones are not recorded.
func (g *Guard) Fail(err error) error {
	f := &failure{err: err, since: time.Now()}
	if !g.failure.CompareAndSwap(nil, f) {
		return err
	}
	if g.wanted.Load() == 0 {
		g.wanted.Store(g.reserve() + Slack) // for Health, which does not measure
	}
	g.log.Error("storage full or failing; refusing commits until space returns", "err", err)
	g.recMu.Lock()
	defer g.recMu.Unlock()
	if !g.closed {
		g.running.Add(1)
		go g.recover()
	}
	return err
}

// Err returns the error writes are refused with, or nil.
func (g *Guard) Err() error {
	if f := g.failure.Load(); f != nil {
		return f.err
	}
	return nil
}

// Health returns nil while writes are admitted, and otherwise an error
// wrapping the failure that says since when and what to do. It measures
// nothing: it answers in constant time.
func (g *Guard) Health() error {
	f := g.failure.Load()
	if f == nil {
		return nil
	}
	return fmt.Errorf("%s: refusing commits since %s until %s has %d bytes free (free space there): %w",
		g.name, f.since.UTC().Format(time.RFC3339), g.dir, g.wanted.Load(), f.err)
}

// Close stops waiting for space; Admit and Health go on answering.
func (g *Guard) Close() {
	g.recMu.Lock()
	if !g.closed {
		g.closed = true
		close(g.stop)
	}
	g.recMu.Unlock()
	g.running.Wait()
}

// recover waits until the reserve plus Slack is free and a probe of Slack
// bytes succeeds, then lifts the failure.
func (g *Guard) recover() {
	defer g.running.Done()
	wait := retryFirst
	for {
		select {
		case <-g.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
		free, err := Free(g.dir)
		if err == nil {
			want := g.reserve() + Slack
			g.wanted.Store(want)
			if free < want {
				err = fmt.Errorf("%d bytes free, waiting for %d", free, want)
			}
		}
		if err == nil {
			err = Probe(g.dir, Slack)
		}
		if err != nil {
			g.log.Debug("storage still short of space", "dir", g.dir, "err", err)
			continue
		}
		if g.reopen != nil {
			if err := g.reopen(); err != nil {
				g.log.Warn("space returned, but the store did not come back; retrying", "dir", g.dir, "err", err)
				continue
			}
		}
		g.mu.Lock()
		g.checked = time.Time{}
		f := g.failure.Swap(nil)
		g.mu.Unlock()
		g.log.Info("storage has space again; taking commits", "dir", g.dir, "down", time.Since(f.since).Round(time.Millisecond).String())
		return
	}
}
