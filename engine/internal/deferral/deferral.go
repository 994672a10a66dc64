package deferral

import (
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Linger keeps a group of deferred commits (driver.Batch.Defer) open for
// company, so they share the sync of the next commit someone waits on
// instead of paying one of their own. It receives from queue for at most
// window and hands each arrival to take, until take reports that the
// group should go (an arrival that is not deferred, or one that does not
// fit and that take keeps for the next group) or queue closes.
//
// A writer calls it only when every commit of its group is deferred; the
// group then waits at most window longer than it would have.
func Linger[T any](queue <-chan T, window time.Duration, take func(T) (more bool)) {
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		select {
		case q, ok := <-queue:
			if !ok || !take(q) {
				return
			}
		case <-timer.C:
			return
		}
	}
}

// Gate decides which commits marked driver.Batch.Defer an engine
// defers: those submitted within the defer window after a commit that is
// not deferred. Deferring pays while such commits keep coming, since their
// syncs are the ones to share; without them a deferred commit would only
// wait out the window and then sync alone (a subscriber replaying a
// backlog with nobody publishing, say). The zero window defers nothing.
type Gate struct {
	window time.Duration
	base   time.Time
	last   atomic.Int64 // since base: the latest commit not marked Defer
}

// NewGate returns a gate for window (driver.Options.Deferral).
func NewGate(window time.Duration) *Gate {
	g := &Gate{window: window, base: time.Now()}
	g.last.Store(-int64(window))
	return g
}

// Window is how long a deferred commit may wait; zero when none is
// deferred.
func (g *Gate) Window() time.Duration { return g.window }

// Defer reports whether the commit of b is to be deferred, and notes the
// submission of a commit that is not marked. Call it once per commit, at
// submission.
func (g *Gate) Defer(b *driver.Batch) bool {
	if g.window <= 0 {
		return false
	}
	now := int64(time.Since(g.base))
	if !b.Defer {
		g.last.Store(now)
		return false
	}
	return now-g.last.Load() < int64(g.window)
}
