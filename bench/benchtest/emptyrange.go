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
	commitEach(b, e, deletedAfter, func(batch *engine.Batch, i int) {
		batch.Put(fmt.Appendf(nil, "b/%08d", i), []byte("churned"))
	})
	commitEach(b, e, deletedAfter, func(batch *engine.Batch, i int) {
		batch.Delete(fmt.Appendf(nil, "b/%08d", i))
	})
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
