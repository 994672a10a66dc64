package driver

import (
	"errors"
	"slices"
	"testing"
)

// TestCompletedLog checks the handles of commits that complete inside
// Submit: done at once, with n keys all k whether they fit in the handle
// or not, and the shared empty one left as it is by a completion.
func TestCompletedLog(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 40} {
		h := CompletedLog(7, n)
		select {
		case <-h.Done():
		default:
			t.Fatalf("n=%d: not done", n)
		}
		res, err := h.Result()
		if err != nil || len(res.Keys) != n || slices.ContainsFunc(res.Keys, func(k LogKey) bool { return k != 7 }) {
			t.Fatalf("n=%d: result %v, %v", n, res.Keys, err)
		}
	}
	empty := CompletedLog(1, 0)
	empty.complete(Result{Keys: []LogKey{9}}, errors.New("late"))
	if res, err := CompletedLog(2, 0).Result(); err != nil || len(res.Keys) != 0 {
		t.Fatalf("the shared empty handle changed: %v, %v", res.Keys, err)
	}
	a, b := CompletedLog(5, 1), CompletedLog(6, 1)
	if ka, _ := a.Result(); ka.Keys[0] != 5 {
		t.Fatalf("a handle's keys shared with another's: %v", ka.Keys)
	}
	if kb, _ := b.Result(); cap(kb.Keys) != 1 {
		t.Fatalf("keys capacity %d: an append would write into the handle", cap(kb.Keys))
	}
}
