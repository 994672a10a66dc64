package group

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

func all(bool, int) bool { return true }

// TestOrderAndFit checks that commits leave in the order they were put,
// that a commit that does not fit waits for the next group, and that a
// commit opening a group always goes.
func TestOrderAndFit(t *testing.T) {
	q := New(Options[int]{})
	for i := range 10 {
		if err := q.Put(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]int
	for len(got) < 4 {
		sum := 0
		g := q.Next(nil, func(first bool, v int) bool {
			if !first && sum+v > 10 {
				return false
			}
			sum += v
			return true
		})
		got = append(got, append([]int(nil), g...))
	}
	want := [][]int{{0, 1, 2, 3, 4}, {5}, {6}, {7}}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("groups %v, want %v first", got, want)
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("groups %v, want %v first", got, want)
			}
		}
	}
}

// TestCloseDrains checks that Close refuses later Puts and that Next
// returns what was queued before it, then nil.
func TestCloseDrains(t *testing.T) {
	q := New(Options[int]{MaxGroup: 2})
	for i := range 3 {
		if err := q.Put(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	if err := q.Put(t.Context(), 9); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
	if g := q.Next(nil, all); len(g) != 2 {
		t.Fatalf("first group after Close: %v, want 2 commits (MaxGroup)", g)
	}
	if g := q.Next(nil, all); len(g) != 1 || g[0] != 2 {
		t.Fatalf("second group after Close: %v, want [2]", g)
	}
	if g := q.Next(nil, all); g != nil {
		t.Fatalf("Next on a closed, empty queue: %v, want nil", g)
	}
}

// TestBackPressure checks that Put waits while the queue is full, gives
// up with ctx, and goes on once the writer took commits.
func TestBackPressure(t *testing.T) {
	q := New(Options[int]{Limit: 2})
	for i := range 2 {
		if err := q.Put(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := q.Put(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put into a full queue: %v, want the ctx's error", err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Put(t.Context(), 3) }()
	if g := q.Next(nil, all); len(g) != 2 {
		t.Fatalf("group %v, want the 2 queued commits", g)
	}
	if err := <-done; err != nil {
		t.Fatalf("Put once there was room: %v", err)
	}
	if g := q.Next(nil, all); len(g) != 1 || g[0] != 3 {
		t.Fatalf("group %v, want [3]: the commit that waited, and not the refused one", g)
	}
}

// TestGatherWaitsForReturning checks the returned-count rule: after a
// group of 4, a group that starts with one returning commit waits for the
// other 3, which arrive within the window, and takes them all.
func TestGatherWaitsForReturning(t *testing.T) {
	q := New(Options[int]{Rule: Rule{
		Wait:     func(int, time.Duration) time.Duration { return time.Minute },
		Returned: true,
	}})
	for i := range 4 {
		if err := q.Put(t.Context(), i); err != nil {
			t.Fatal(err)
		}
	}
	if g := q.Next(nil, all); len(g) != 4 {
		t.Fatalf("first group %v, want 4 commits", g)
	}
	q.Advance()
	q.Done(4, time.Millisecond)
	if err := q.Put(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 5; i < 8; i++ {
			time.Sleep(time.Millisecond)
			if err := q.Put(t.Context(), i); err != nil {
				t.Error(err)
			}
		}
	}()
	g := q.Next(nil, all)
	wg.Wait()
	if len(g) != 4 || g[0] != 4 || g[3] != 7 {
		t.Fatalf("second group %v, want [4 5 6 7]: the writer waits for the submitters coming back", g)
	}
}

// TestLingerHoldsDeferred checks that a group of deferred commits waits
// for a commit that is not deferred and takes it.
func TestLingerHoldsDeferred(t *testing.T) {
	q := New(Options[int]{Linger: time.Minute, Deferred: func(v int) bool { return v < 0 }})
	if err := q.Put(t.Context(), -1); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		if err := q.Put(t.Context(), 1); err != nil {
			t.Error(err)
		}
	}()
	if g := q.Next(nil, all); len(g) != 2 || g[1] != 1 {
		t.Fatalf("group %v, want [-1 1]: the deferred commit waits for company", g)
	}
}
