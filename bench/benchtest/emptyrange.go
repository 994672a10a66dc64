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

// EmptyRange measures range reads of key ranges with nothing in them,
// right before 20,000 keys written and deleted, on the registered engine
// name: what a broker's expiry pass asks of an empty index while another
// table churns ("ranges=1": one op is one snapshot, one iterator and its
// first Next), and what a returning session's read of its rows asks
// ("ranges=3": three ranges, one after the other, in one snapshot).
func EmptyRange(b *testing.B, name string) {
	e := openNoSync(b, name)
	ctx := b.Context()
	commitEach(b, e, deletedAfter, func(batch *engine.Batch, i int) {
		batch.Put(fmt.Appendf(nil, "b/%08d", i), []byte("churned"))
	})
	commitEach(b, e, deletedAfter, func(batch *engine.Batch, i int) {
		batch.Delete(fmt.Appendf(nil, "b/%08d", i))
	})
	ranges := [][2]string{{"a1/", "a10"}, {"a2/", "a20"}, {"a3/", "a30"}}
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("ranges=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				snap, err := e.Snapshot(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range ranges[:n] {
					it, err := snap.Iter(ctx, []byte(r[0]), []byte(r[1]))
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
				}
				_ = snap.Close()
			}
		})
	}
}
