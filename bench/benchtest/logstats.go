package benchtest

import (
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// retainedEntries is the log LogStats runs over: a broker's log while
// offline sessions hold a backlog.
const retainedEntries = 200_000

// LogStats measures LogStats on the registered engine name over a retained
// log of 200,000 entries, each call after one more commit: what a
// broker's retention pass asks the engine while the log is long. One op
// is one commit of one entry and one LogStats.
func LogStats(b *testing.B, name string) {
	e := openNoSync(b, name)
	ctx := b.Context()
	commitEach(b, e, retainedEntries, func(batch *engine.Batch, i int) {
		batch.Append(fmt.Appendf(nil, "entry %d", i))
	})
	if _, err := e.LogStats(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := engine.Commit(ctx, e, new(engine.Batch).Append(fmt.Appendf(nil, "more %d", i))); err != nil {
			b.Fatal(err)
		}
		st, err := e.LogStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if st.Entries != uint64(retainedEntries+i+1) {
			b.Fatalf("log stats count %d entries, want %d", st.Entries, retainedEntries+i+1)
		}
	}
}
