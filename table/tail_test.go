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
	batch, covered, _ := tl.after(tl.floor, 100)
	if !covered || len(batch) != len(tl.entries) || batch[0].pos.key != tl.floor.key+1 {
		t.Fatalf("reader at the floor: covered %v, %d of %d entries", covered, len(batch), len(tl.entries))
	}
	if _, covered, _ := tl.after(pos{key: 1, idx: wholeKey}, 100); covered {
		t.Fatalf("a reader before the floor is told the window covers it")
	}
	if batch, covered, _ := tl.after(tl.head, 100); !covered || len(batch) != 0 {
		t.Fatalf("a reader at the head: covered %v, %d entries", covered, len(batch))
	}
}
