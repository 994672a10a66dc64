//go:build !nopebble

package pebble

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// TestLogStatsToldMatchRead checks the figures the engine keeps from the
// commits it applies (logstats.Counter.Appended) against a count that
// reads the log: after commits of one to five entries of assorted sizes,
// under every sync mode's commit path, with truncations between them.
func TestLogStatsToldMatchRead(t *testing.T) {
	for _, sync := range []driver.SyncMode{driver.SyncNone, driver.SyncAlways} {
		t.Run(fmt.Sprint(sync), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			var keys []driver.LogKey
			commits := 0
			// Twice: on a new store, and reopened over the first's log.
			for range 2 {
				e, err := open(ctx, driver.Options{Dir: dir, Sync: sync})
				if err != nil {
					t.Fatal(err)
				}
				d := e.(*db)
				for range 300 {
					i := commits
					commits++
					b := new(driver.Batch).Put(fmt.Appendf(nil, "k%d", i%7), []byte("v"))
					for j := range 1 + i%5 {
						b.Append(make([]byte, (i*31+j*7)%300))
					}
					h, err := d.Submit(ctx, b)
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
					told, err := d.LogStats(ctx)
					if err != nil {
						t.Fatal(err)
					}
					d.stats.Reset()
					read, err := d.LogStats(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if told != read {
						t.Fatalf("after %d commits: figures kept from the commits %+v, read from the log %+v", i+1, told, read)
					}
					if err := d.Truncate(ctx, keys[len(keys)/2]); err != nil {
						t.Fatal(err)
					}
				}
				if err := d.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
