package benchtest

import (
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// deletedAfter is how many deleted keys follow the empty range EmptyRange
// reads: a busy table's churn (staging slots written and deleted at every
// QoS 2 message) sorted right after a small one.
const deletedAfter = 20_000

// EmptyRange measures a range read of a key range with nothing in it,
// right before 20,000 keys written and deleted, on the registered engine
// name: what a broker's expiry pass asks of an empty index while another
// table churns. One op is one snapshot, one iterator and its first Next.
func EmptyRange(b *testing.B, name string) {
	e := openNoSync(b, name)
	ctx := b.Context()
	for _, del := range []bool{false, true} {
		for i := 0; i < deletedAfter; i += 1000 {
			batch := new(engine.Batch)
			for j := range 1000 {
				key := fmt.Appendf(nil, "b/%08d", i+j)
				if del {
					batch.Delete(key)
				} else {
					batch.Put(key, []byte("churned"))
				}
			}
			if _, err := engine.Commit(ctx, e, batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		snap, err := e.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		it, err := snap.Iter(ctx, []byte("a/"), []byte("a0"))
		if err != nil {
			b.Fatal(err)
		}
		if it.Next() {
			b.Fatalf("found %q in an empty range", it.Key())
		}
		if err := it.Err(); err != nil {
			b.Fatal(err)
		}
		_ = it.Close()
		_ = snap.Close()
	}
}
