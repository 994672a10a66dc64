package table

import (
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestSeqCursorWhole loads a seqCursor while another goroutine stores
// into it: every load must be a cursor that was stored whole (here, one
// whose index matches its key), and loads never go back.
func TestSeqCursorWhole(t *testing.T) {
	var s seqCursor
	const n = 200_000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last engine.LogKey
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := s.load()
				if c.Next != uint32(c.Key)*7 {
					t.Errorf("loaded key %d with the index of another store, %d", c.Key, c.Next)
					return
				}
				if c.Key < last {
					t.Errorf("loaded key %d after %d", c.Key, last)
					return
				}
				last = c.Key
			}
		}()
	}
	for k := engine.LogKey(1); k <= n; k++ {
		s.store(Cursor{Key: k, Next: uint32(k) * 7})
	}
	close(stop)
	wg.Wait()
	if c := s.load(); c.Key != n {
		t.Fatalf("last load: %+v, want key %d", c, n)
	}
}
