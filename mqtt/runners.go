package mqtt

import (
	"context"
	"time"
)

// runnerIdle is how long an idle runner waits for work before it ends.
const runnerIdle = 30 * time.Second

// runners runs short-lived work of connections (their ack loops and
// senders) on goroutines that stay around once their work is done, for
// the next. A goroutine started for each ack loop begins with a small stack and grows
// it while it waits for its first commit, every time: in a connect storm,
// where every connection's first acknowledgements start an ack loop, that
// growth was a sixth of the broker's CPU. A runner's stack grows once.
type runners struct {
	// idle hands work to a runner waiting for it; unbuffered, so a send
	// succeeds only when one is idle.
	idle chan func()
	// done ends idle runners: the broker closed.
	done <-chan struct{}
}

func newRunners(ctx context.Context) *runners {
	return &runners{idle: make(chan func()), done: ctx.Done()}
}

// run runs fn on an idle runner, or on a new one when none is idle. It
// never waits for fn.
func (r *runners) run(fn func()) {
	select {
	case r.idle <- fn:
	default:
		go r.loop(fn)
	}
}

// loop runs fn, then whatever work comes while it is idle, and ends after
// runnerIdle without any, or once idle after the broker closed.
func (r *runners) loop(fn func()) {
	t := time.NewTimer(runnerIdle)
	defer t.Stop()
	for {
		fn()
		fn = nil // nothing of the last work is kept while idle
		t.Reset(runnerIdle)
		select {
		case fn = <-r.idle:
		case <-t.C:
			return
		case <-r.done:
			return
		}
	}
}
