package kvlog

import "time"

// Linger keeps a group of deferred commits (engine.Batch.Defer) open for
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
