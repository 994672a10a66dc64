//go:build !nojetstream

package jetstream

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestWALConcurrentScansKeepConnection: readers scanning a log of large
// transactions at once, as subscribers catching up after a restart do,
// read every entry without the server dropping the engine's connection
// as a slow consumer (pages of up to 48 MiB each, several at once, went
// past the server's 64 MiB for one connection).
func TestWALConcurrentScansKeepConnection(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	const commits, perCommit, size, readers = 40, 2, 1 << 20, 8
	for i := range commits {
		b := new(engine.Batch)
		for j := range perCommit {
			e := make([]byte, size)
			binary.BigEndian.PutUint64(e, uint64(i*perCommit+j))
			b.Append(e)
		}
		if _, err := engine.Commit(ctx, d, b); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			err := d.ScanLog(ctx, 0, false, func(e engine.Entry) bool {
				if got := binary.BigEndian.Uint64(e.Value); len(e.Value) != size || got != uint64(n) {
					errs <- fmt.Errorf("reader %d: entry %d holds entry %d (%d bytes)", r, n, got, len(e.Value))
					return false
				}
				n++
				return true
			})
			switch {
			case err != nil:
				errs <- fmt.Errorf("reader %d: scan after %d entries: %w", r, n, err)
			case n != commits*perCommit:
				errs <- fmt.Errorf("reader %d: %d entries, want %d", r, n, commits*perCommit)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := d.nc.Stats().Reconnects; n != 0 {
		t.Errorf("the connection to the embedded server dropped %d times during the scans", n)
	}
}
