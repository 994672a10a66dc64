package workers

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls runs each piece of work once, no more than n at a time, returns
// only after it ran, and runs it inline once its context ended, by which
// time its goroutines are gone.
func TestCalls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	const n = 3
	c := StartCalls(ctx, n, &wg)
	var running, most, ran atomic.Int32
	var callers sync.WaitGroup
	for range 20 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			c.Do(func() {
				r := running.Add(1)
				for {
					m := most.Load()
					if r <= m || most.CompareAndSwap(m, r) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				running.Add(-1)
				ran.Add(1)
			})
		}()
	}
	callers.Wait()
	if ran.Load() != 20 || most.Load() > n || most.Load() < 1 {
		t.Fatalf("ran %d (want 20), at most %d at once (want 1 to %d)", ran.Load(), most.Load(), n)
	}
	runsInCallerOnceEnded(t, cancel, &wg, c.Do)
}

// Calls.Post returns at once, whatever is busy; the posted work runs on
// the goroutines, at most as many at once, in the order it was posted
// (with one goroutine), without a goroutine per piece while it waits;
// the WaitGroup counts it; and after the end of the context it runs in
// the caller.
func TestCallsPost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c := StartCalls(ctx, 1, &wg)
	gate := make(chan struct{})
	c.Post(func() { <-gate }) // holds the one goroutine
	before := runtime.NumGoroutine()
	const n = 10000
	var order []int
	for i := range n {
		c.Post(func() { order = append(order, i) }) // one goroutine at a time: no race
	}
	if g := runtime.NumGoroutine(); g > before+2 {
		t.Fatalf("%d goroutines for %d pieces of posted work waiting, %d before them", g, n, before)
	}
	close(gate)
	waitFor(t, "the posted work", func() bool {
		var got int
		c.Do(func() { got = len(order) })
		return got == n
	})
	for i, v := range order {
		if v != i {
			t.Fatalf("posted work ran out of order: %d at %d", v, i)
		}
	}
	runsInCallerOnceEnded(t, cancel, &wg, c.Post)
}

// runsInCallerOnceEnded ends a Calls' context with cancel, waits for its
// goroutines (wg), and checks that run (Do or Post) then runs work in its
// caller.
func runsInCallerOnceEnded(t *testing.T, cancel func(), wg *sync.WaitGroup, run func(func())) {
	t.Helper()
	cancel()
	wg.Wait()
	done := false
	run(func() { done = true })
	if !done {
		t.Fatal("work after the end of the context did not run in the caller")
	}
}

// Pool runs every piece of work it is given, without the giver waiting.
func TestPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewPool(ctx)
	var wg sync.WaitGroup
	var ran atomic.Int32
	for range 50 {
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait()
	if ran.Load() != 50 {
		t.Fatalf("ran %d of 50", ran.Load())
	}
	// Work handed over once the goroutines idle runs as well.
	time.Sleep(10 * time.Millisecond)
	release := make(chan struct{})
	got := make(chan struct{})
	p.Go(func() { close(got); <-release })
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("work given to the pool did not run")
	}
	close(release)
}

// A Pool ends the goroutines that stayed idle, keeps none once its
// context ended, and ends a goroutine started after that once its work is
// done.
func TestPoolTrimsAndEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newPool(ctx, 20*time.Millisecond)
	release := make(chan struct{})
	var started sync.WaitGroup
	for range 20 {
		started.Add(1)
		p.Go(func() { started.Done(); <-release })
	}
	started.Wait()
	if n := p.live.Load(); n != 20 {
		t.Fatalf("%d goroutines for 20 pieces of work at once", n)
	}
	close(release)
	waitFor(t, "the idle goroutines to be trimmed", func() bool { return p.live.Load() == 0 })

	// Work given while a goroutine waits goes to it (a Pool that trims
	// nothing while this runs). A goroutine counts as waiting just before
	// it blocks on the hand-off, so a piece of work given in between
	// starts a second one: a few may start over 20 pieces, never one each.
	cancel()
	waitFor(t, "the pool to end", func() bool { return p.live.Load() == 0 })
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	p = newPool(ctx, time.Hour)
	for i := range 20 {
		if i > 0 {
			waitFor(t, "every goroutine to wait", func() bool { return p.waiting.Load() == p.live.Load() })
		}
		done := make(chan struct{})
		p.Go(func() { close(done) })
		<-done
	}
	if n := p.live.Load(); n > 3 {
		t.Fatalf("%d goroutines for 20 pieces of work given one at a time", n)
	}

	block := make(chan struct{})
	p.Go(func() { <-block })
	cancel()
	waitFor(t, "the idle goroutines to end with the context", func() bool { return p.live.Load() == 1 })
	close(block)
	waitFor(t, "the busy goroutine to end once done", func() bool { return p.live.Load() == 0 })
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	waitFor(t, "a goroutine started after the end to end", func() bool { return p.live.Load() == 0 })
}

// An idle goroutine keeps nothing of the work it ran: a closure over a
// connection would keep the connection.
func TestPoolKeepsNoWork(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newPool(ctx, time.Hour)
	freed := make(chan struct{})
	func() {
		obj := new([64]byte)
		runtime.SetFinalizer(obj, func(*[64]byte) { close(freed) })
		done := make(chan struct{})
		p.Go(func() { obj[0]++; close(done) })
		<-done
	}()
	waitFor(t, "the goroutine to wait", func() bool { return p.waiting.Load() == 1 })
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("an idle goroutine kept what its last work referred to")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkPoolHandOff measures handing work to an idle goroutine of a
// Pool and hearing back from it: the hop a parked connection's input or
// a session's sender takes.
func BenchmarkPoolHandOff(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := NewPool(ctx)
	back := make(chan struct{})
	fn := func() { back <- struct{}{} }
	b.ReportAllocs()
	for b.Loop() {
		p.Go(fn)
		<-back
	}
}

// BenchmarkCallsDo measures a call run on a Calls goroutine and waited
// for: the hop of every store call a connection makes.
func BenchmarkCallsDo(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c := StartCalls(ctx, 4, &wg)
	defer func() { cancel(); wg.Wait() }()
	n := 0
	fn := func() { n++ }
	b.ReportAllocs()
	for b.Loop() {
		c.Do(fn)
	}
}
