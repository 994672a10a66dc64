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
	"sync/atomic"
	"time"
)

// IdleTimeout is about how long a goroutine of a Pool stays idle before
// it ends: a Pool looks every IdleTimeout and ends as many idle
// goroutines as were idle at both its last two looks.
const IdleTimeout = 30 * time.Second

// Pool runs work without waiting for it, on a goroutine that was idle or,
// when none is, on a new one. Goroutines stay for the next work while
// work keeps coming (see IdleTimeout), and end once idle after the Pool's
// context ended.
//
// A waiting goroutine only receives from one channel: with a timer and
// the context's channel beside it, the select of each hand-off and the
// runtime's timer heap were a tenth of a fleet's delivery CPU. The Pool
// trims idle goroutines by count instead, and ends them all the same way
// once its context ended.
type Pool struct {
	// idle hands work to a goroutine waiting for it; unbuffered, so a
	// send succeeds only when one is idle. A nil func ends the goroutine
	// that takes it.
	idle chan func()
	done <-chan struct{}
	// waiting counts the goroutines waiting for work, live all of them.
	waiting, live atomic.Int32
}

// NewPool returns a Pool whose goroutines end once ctx ends.
func NewPool(ctx context.Context) *Pool { return newPool(ctx, IdleTimeout) }

func newPool(ctx context.Context, idleTimeout time.Duration) *Pool {
	p := &Pool{idle: make(chan func()), done: ctx.Done()}
	go p.trim(idleTimeout)
	return p
}

// Go runs fn on an idle goroutine, or on a new one when none is idle. It
// never waits for fn. fn must not be nil.
func (p *Pool) Go(fn func()) {
	select {
	case p.idle <- fn:
	default:
		p.live.Add(1)
		go p.loop(fn)
	}
}

// loop runs fn, then whatever work comes while it is idle, until it is
// handed nil, or finds the Pool's context ended when its work is done.
func (p *Pool) loop(fn func()) {
	defer p.live.Add(-1)
	for fn != nil {
		fn() // fn is dead from here until the next work: an idle goroutine keeps nothing of the last
		select {
		case <-p.done:
			return
		default:
		}
		p.waiting.Add(1)
		fn = <-p.idle
		p.waiting.Add(-1)
	}
}

// trim ends, every period, as many idle goroutines as were waiting at
// both this look and the last: that many were not needed for a period.
// Once the Pool's context ended, it ends every goroutine as it comes to
// wait, and returns when none is left. (One that starts after that sees
// the context ended once its work is done.)
func (p *Pool) trim(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var last int32
	for {
		select {
		case <-t.C:
		case <-p.done:
			for p.live.Load() > 0 {
				select {
				case p.idle <- nil:
				case <-time.After(time.Millisecond):
				}
			}
			return
		}
		now := p.waiting.Load()
		n := min(last, now)
		last = now - n
	ending:
		for range n {
			select {
			case p.idle <- nil:
			default:
				break ending
			}
		}
	}
}

// Calls runs work on a fixed set of long-lived goroutines and waits for
// it: a bound on how much of it runs at once, as well as a home for deep
// stacks. Once its context ended, work runs in the caller's goroutine.
type Calls struct {
	jobs chan job
	ctx  context.Context
	wg   *sync.WaitGroup

	// posted is the work Post queued, from head on, and posting says a
	// goroutine hands it to the goroutines (see Post).
	mu      sync.Mutex
	posted  []func()
	head    int
	posting bool
	// closed says the goroutines ended: Post runs work in its caller.
	closed bool
}

// job is one piece of work handed to a goroutine of Calls, which says on
// done once it ran; a job without fn ends the goroutine.
type job struct {
	fn   func()
	done chan struct{}
}

// dones recycles the channels a job's end is told on: one per call was an
// allocation on every store call of the broker.
var dones = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// StartCalls starts n goroutines that run work until ctx ends, each
// counted in wg until it returns.
func StartCalls(ctx context.Context, n int, wg *sync.WaitGroup) *Calls {
	c := &Calls{jobs: make(chan job), ctx: ctx, wg: wg}
	wg.Add(n + 1)
	for range n {
		go c.loop(wg)
	}
	// The goroutines wait on their jobs alone (a select beside the
	// context's channel cost every call); the end comes as a job.
	go func() {
		defer wg.Done()
		<-ctx.Done()
		for range n {
			c.jobs <- job{}
		}
		// Counted until here, so a Post before this adds to a count
		// that is not zero.
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	}()
	return c
}

// Do runs fn on one of the goroutines, when one is free, and returns once
// it ran.
func (c *Calls) Do(fn func()) {
	done := dones.Get().(chan struct{})
	select {
	case c.jobs <- job{fn: fn, done: done}:
		<-done
		dones.Put(done)
	case <-c.ctx.Done():
		dones.Put(done)
		fn()
	}
}

// Post runs fn on one of the goroutines without waiting for it: posted
// work is handed over in the order it came, each piece as a goroutine is
// free, competing with Do's. Until then a piece holds one word of a
// queue, not a goroutine, so a wave of thousands costs kilobytes, not
// thousands of waiting stacks. Once the context ended, posted work runs
// on the goroutine that hands it over; it is counted in the WaitGroup
// StartCalls was given until the queue is empty. Once the goroutines
// ended, Post runs fn itself.
func (c *Calls) Post(fn func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		fn()
		return
	}
	c.posted = append(c.posted, fn)
	start := !c.posting
	if start {
		c.posting = true
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		go c.handOver()
	}
}

// handOver hands the posted work to the goroutines until none is left.
func (c *Calls) handOver() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if c.head == len(c.posted) {
			clear(c.posted)
			c.posted, c.head, c.posting = c.posted[:0], 0, false
			c.mu.Unlock()
			return
		}
		fn := c.posted[c.head]
		c.posted[c.head] = nil
		c.head++
		c.mu.Unlock()
		select {
		case c.jobs <- job{fn: fn}:
		case <-c.ctx.Done():
			fn()
		}
	}
}

func (c *Calls) loop(wg *sync.WaitGroup) {
	defer wg.Done()
	for j := range c.jobs {
		if j.fn == nil {
			return
		}
		j.fn()
		if j.done != nil {
			j.done <- struct{}{}
		}
	}
}
