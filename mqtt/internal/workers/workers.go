// Package workers runs the broker's short pieces of work on goroutines
// that outlive them, so their stacks grow once rather than once per
// connection.
//
// The engine's read and commit paths run deep. A goroutine started for a
// connection begins with the smallest stack and grows it, copying it
// several times, the first time it makes such calls, for every
// connection of a connect storm, and the collector shrinks it again once
// the connection idles: a quarter of a storm's CPU went to that before
// these pools. A Pool starts goroutines as work needs them and keeps them
// while work keeps coming; Calls runs work on a fixed set and waits for
// it.
package workers

import (
	"context"
	"sync"
	"time"
)

// IdleTimeout is how long an idle goroutine of a Pool waits for work
// before it ends.
const IdleTimeout = 30 * time.Second

// Pool runs work without waiting for it, on a goroutine that was idle or,
// when none is, on a new one. Goroutines stay IdleTimeout after their
// work for the next, and end once idle after the Pool's context ended.
type Pool struct {
	// idle hands work to a goroutine waiting for it; unbuffered, so a
	// send succeeds only when one is idle.
	idle chan func()
	done <-chan struct{}
}

// NewPool returns a Pool whose goroutines end once ctx ends.
func NewPool(ctx context.Context) *Pool {
	return &Pool{idle: make(chan func()), done: ctx.Done()}
}

// Go runs fn on an idle goroutine, or on a new one when none is idle. It
// never waits for fn.
func (p *Pool) Go(fn func()) {
	select {
	case p.idle <- fn:
	default:
		go p.loop(fn)
	}
}

// loop runs fn, then whatever work comes while it is idle, and ends after
// IdleTimeout without any, or once idle after the Pool's context ended.
func (p *Pool) loop(fn func()) {
	t := time.NewTimer(IdleTimeout)
	defer t.Stop()
	for {
		fn()
		fn = nil // nothing of the last work is kept while idle
		t.Reset(IdleTimeout)
		select {
		case fn = <-p.idle:
		case <-t.C:
			return
		case <-p.done:
			return
		}
	}
}

// Calls runs work on a fixed set of long-lived goroutines and waits for
// it: a bound on how much of it runs at once, as well as a home for deep
// stacks. Once its context ended, work runs in the caller's goroutine.
type Calls struct {
	jobs chan job
	ctx  context.Context
}

// job is one piece of work handed to a goroutine of Calls; done is closed
// once it ran.
type job struct {
	fn   func()
	done chan struct{}
}

// StartCalls starts n goroutines that run work until ctx ends, each
// counted in wg until it returns.
func StartCalls(ctx context.Context, n int, wg *sync.WaitGroup) *Calls {
	c := &Calls{jobs: make(chan job), ctx: ctx}
	wg.Add(n)
	for range n {
		go c.loop(wg)
	}
	return c
}

// Do runs fn on one of the goroutines, when one is free, and returns once
// it ran.
func (c *Calls) Do(fn func()) {
	j := job{fn: fn, done: make(chan struct{})}
	select {
	case c.jobs <- j:
		<-j.done
	case <-c.ctx.Done():
		fn()
	}
}

func (c *Calls) loop(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case j := <-c.jobs:
			j.fn()
			close(j.done)
		case <-c.ctx.Done():
			return
		}
	}
}
