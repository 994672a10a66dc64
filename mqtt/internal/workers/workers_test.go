package workers

import (
	"context"
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
	cancel()
	wg.Wait()
	done := false
	c.Do(func() { done = true })
	if !done {
		t.Fatal("work after the end of the context did not run inline")
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
