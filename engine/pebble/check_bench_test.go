//go:build !nopebble

package pebble_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// BenchmarkAbsentCheck commits, as an inbound QoS 2 PUBLISH stages its
// message, a put conditional on its key being absent, over keys never
// written before, with most of the store already in the bottom level:
// the check reads the store, since no earlier check learned the key.
func BenchmarkAbsentCheck(b *testing.B) {
	ctx := context.Background()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: b.TempDir(), Sync: engine.SyncNone,
		Params: map[string]string{"memtable_mb": "1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	value := make([]byte, 100)
	// 20 MB of keys of the same table, among which the checked ones
	// fall, flushed and compacted down as the small memtable fills.
	for i := range 200_000 {
		var batch engine.Batch
		batch.Put(fmt.Appendf(nil, "vmqtt.qos2in\x00client-%04d\x00%08d", i%1000, 2*i), value)
		if _, err := engine.Commit(ctx, e, &batch); err != nil {
			b.Fatal(err)
		}
	}
	// One check a commit (a lone QoS 2 staging), and sixteen (a group of
	// a pipelining client's stagings, which share one iterator).
	for _, n := range []int{1, 16} {
		next := 0 // across the runs of b.Run: a key is checked once
		b.Run(fmt.Sprintf("checks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			first := next
			for range b.N {
				var batch engine.Batch
				for range n {
					key := fmt.Appendf(nil, "vmqtt.qos2in\x00client-%04d-%d\x00%08d", next%1000, n, 2*next+1)
					batch.ExpectAbsent(key).Put(key, value)
					next++
				}
				if _, err := engine.Commit(ctx, e, &batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(next-first), "ns/check")
		})
	}
}
