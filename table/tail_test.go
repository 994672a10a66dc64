package table

import (
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

func TestTailWindowBounds(t *testing.T) {
	tl := newTail(nil, pos{key: 1, idx: wholeKey}, 4, 100)
	key := uint64(1)
	add := func(size int) {
		key++
		tl.publish([]*logEntry{{pos: pos{key: engine.LogKey(key)}, count: 1, value: make([]byte, size)}})
	}
	// One entry above twice the byte bound stays: the window never empties.
	add(1000)
	if len(tl.entries) != 1 {
		t.Fatalf("window holds %d entries after one oversized entry", len(tl.entries))
	}
	for i := 0; i < 20; i++ {
		add(10)
	}
	if n := len(tl.entries); n > 8 || n < 4 {
		t.Fatalf("window holds %d entries, the bound is 4 (trimmed at 8)", n)
	}
	if tl.bytes > 200 {
		t.Fatalf("window holds %d bytes, the bound is 100 (trimmed at 200)", tl.bytes)
	}
	// Contiguity: a reader at the floor finds every entry after it.
	batch, covered, _ := tl.after(tl.floor, 100, false)
	if !covered || len(batch) != len(tl.entries) || batch[0].pos.key != tl.floor.key+1 {
		t.Fatalf("reader at the floor: covered %v, %d of %d entries", covered, len(batch), len(tl.entries))
	}
	if _, covered, _ := tl.after(pos{key: 1, idx: wholeKey}, 100, false); covered {
		t.Fatalf("a reader before the floor is told the window covers it")
	}
	if batch, covered, _ := tl.after(tl.head, 100, false); !covered || len(batch) != 0 {
		t.Fatalf("a reader at the head: covered %v, %d entries", covered, len(batch))
	}
}

// TestTailHandsOutChangedOnlyToWaiters checks that a publish replaces the
// changed channel only when a reader that may wait was handed it with
// nothing to read: one with entries to handle, or one that never waits,
// costs no channel per commit, and a waiter is always woken.
func TestTailHandsOutChangedOnlyToWaiters(t *testing.T) {
	tl := newTail(nil, pos{key: 1, idx: wholeKey}, 100, 1<<20)
	key := uint64(1)
	add := func() {
		key++
		tl.publish([]*logEntry{{pos: pos{key: engine.LogKey(key)}, count: 1, value: []byte("v")}})
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	// A waiter at the head is woken by the next publish.
	batch, _, ch := tl.after(tl.head, 10, true)
	if len(batch) != 0 || closed(ch) {
		t.Fatalf("at the head: %d entries, channel closed %v", len(batch), closed(ch))
	}
	add()
	if !closed(ch) {
		t.Fatal("a reader waiting at the head was not woken by a publish")
	}
	// A reader with entries to handle, and one that never waits, leave
	// the channel in place.
	if batch, _, _ := tl.after(tl.floor, 10, true); len(batch) != 1 {
		t.Fatalf("from the floor: %d entries, want 1", len(batch))
	}
	tl.after(tl.head, 10, false)
	before := tl.changed
	add()
	if tl.changed != before || closed(before) {
		t.Fatal("a publish replaced the changed channel that no waiter took")
	}
	// A reader behind the window may wait after its engine scan.
	_, covered, ch := tl.after(pos{key: 0}, 10, true)
	if covered {
		t.Fatal("a reader before the floor is told the window covers it")
	}
	add()
	if !closed(ch) {
		t.Fatal("a reader behind the window was not woken by a publish")
	}
}
