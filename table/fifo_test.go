package table

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFifoMatchesSlice drives a fifo and a plain slice with the same
// random pushes and pops and compares them after every step, then checks
// that a steady flow through a fifo stops allocating.
func TestFifoMatchesSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q fifo[int]
	var model []int
	for step := range 20000 {
		switch r := rng.IntN(10); {
		case r < 5 || len(model) == 0:
			q.push(step)
			model = append(model, step)
		case r < 8:
			q.popFront()
			model = model[1:]
		default:
			q.popBack()
			model = model[:len(model)-1]
		}
		if q.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(model))
		}
		got := make([]int, q.len())
		for i := range got {
			got[i] = *q.at(i)
		}
		if !slices.Equal(got, model) {
			t.Fatalf("step %d: %v, want %v", step, got, model)
		}
		if len(model) > 0 && *q.back() != model[len(model)-1] {
			t.Fatalf("step %d: back %d, want %d", step, *q.back(), model[len(model)-1])
		}
	}

	var steady fifo[int]
	for i := range 64 {
		steady.push(i)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		steady.popFront()
		steady.push(0)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per pop and push at a steady length", allocs)
	}
}
