package deferral

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

func TestLinger(t *testing.T) {
	// Stops at the first arrival take refuses, leaving the rest queued.
	q := make(chan int, 8)
	for _, v := range []int{1, 2, 0, 3} {
		q <- v
	}
	var got []int
	Linger(q, time.Hour, func(v int) bool { got = append(got, v); return v != 0 })
	if len(got) != 3 || got[2] != 0 || len(q) != 1 {
		t.Fatalf("took %v with %d left, want [1 2 0] and 1 left", got, len(q))
	}

	// Returns once the window passed with nothing arriving.
	empty := make(chan int)
	start := time.Now()
	Linger(empty, 20*time.Millisecond, func(int) bool { t.Fatal("took from an empty queue"); return false })
	if time.Since(start) < 20*time.Millisecond {
		t.Fatalf("returned after %v, before the window", time.Since(start))
	}

	// Returns when the queue closes.
	closed := make(chan int)
	close(closed)
	Linger(closed, time.Hour, func(int) bool { t.Fatal("took from a closed queue"); return false })
}

func TestGate(t *testing.T) {
	marked := &engine.Batch{Defer: true}
	plain := &engine.Batch{}
	g := NewGate(time.Hour)
	if g.Defer(marked) {
		t.Fatal("deferred a commit with no plain commit before it")
	}
	if g.Defer(plain) {
		t.Fatal("deferred a commit not marked Defer")
	}
	first, second := g.Defer(marked), g.Defer(marked)
	if !first || !second {
		t.Fatal("did not defer marked commits right after a plain one")
	}
	short := NewGate(time.Millisecond)
	short.Defer(plain)
	time.Sleep(5 * time.Millisecond)
	if short.Defer(marked) {
		t.Fatal("deferred a marked commit a window after the last plain one")
	}
	if off := NewGate(0); off.Defer(plain) || off.Defer(marked) || off.Window() != 0 {
		t.Fatal("a zero window deferred a commit")
	}
}
