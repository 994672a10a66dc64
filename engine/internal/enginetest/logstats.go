package enginetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// LogStatsToldMatchRead checks the log figures an engine keeps from the
// commits it applies (logstats.Counter.Appended) against a count that
// reads the log: after commits of one to five entries of assorted sizes,
// with truncations between them, on a new store and again reopened over
// its log, under SyncNone and SyncAlways. open opens the engine in dir;
// forget makes its counter forget (logstats.Counter.Reset), so that the
// next LogStats reads the whole log.
func LogStatsToldMatchRead(t *testing.T, open func(ctx context.Context, o driver.Options) (driver.Engine, error), forget func(driver.Engine)) {
	for _, sync := range []driver.SyncMode{driver.SyncNone, driver.SyncAlways} {
		t.Run(fmt.Sprint(sync), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			var keys []driver.LogKey
			commits := 0
			for range 2 {
				e, err := open(ctx, driver.Options{Dir: dir, Sync: sync})
				if err != nil {
					t.Fatal(err)
				}
				for range 300 {
					i := commits
					commits++
					b := new(driver.Batch).Put(fmt.Appendf(nil, "k%d", i%7), []byte("v"))
					for j := range 1 + i%5 {
						b.Append(make([]byte, (i*31+j*7)%300))
					}
					h, err := e.Submit(ctx, b)
					if err != nil {
						t.Fatal(err)
					}
					res, err := h.Wait(ctx)
					if err != nil {
						t.Fatal(err)
					}
					keys = append(keys, res.Keys...)
					if i%50 != 49 {
						continue
					}
					told, err := e.LogStats(ctx)
					if err != nil {
						t.Fatal(err)
					}
					forget(e)
					read, err := e.LogStats(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if told != read {
						t.Fatalf("after %d commits: figures kept from the commits %+v, read from the log %+v", i+1, told, read)
					}
					if err := e.Truncate(ctx, keys[len(keys)/2]); err != nil {
						t.Fatal(err)
					}
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
