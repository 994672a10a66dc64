package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// BenchmarkCommits measures synced single-write commits (64-byte values,
// SyncAlways on the embedded server) from 1, 16 and 64 concurrent
// submitters. Grouping is what lets the rate grow with the submitters: an
// atomic batch costs about the same whatever its size.
func BenchmarkCommits(b *testing.B) {
	for _, submitters := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("submitters=%d", submitters), func(b *testing.B) {
			ctx := context.Background()
			e, err := engine.Open(ctx, "jetstream", engine.Options{Dir: b.TempDir(), Sync: engine.SyncAlways})
			if err != nil {
				b.Fatalf("open: %v", err)
			}
			defer e.Close()
			val := make([]byte, 64)
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, submitters)
			b.ResetTimer()
			for w := 0; w < submitters; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						key := fmt.Appendf(nil, "bench/%d/%d", w, i)
						if _, err := engine.Commit(ctx, e, new(engine.Batch).Put(key, val)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			for err := range errs {
				b.Fatalf("commit: %v", err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		})
	}
}
