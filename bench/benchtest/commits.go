package benchtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/bench/commitbench"
	"github.com/tidemark-io/tidemark/engine"
)

// Commits runs the commit benchmark on the registered engine name as
// sub-benchmarks <engine>/submitters=S/writes=W, reporting commits/s, p99
// completion latency and the ratio to a raw fdatasync loop measured on the
// same disk in the same run (x_fsync: 1.0 means one commit per fsync).
func Commits(b *testing.B, name string) {
	dir := b.TempDir()
	fsync, err := commitbench.FsyncRate(dir, 500*time.Millisecond)
	if err != nil {
		b.Fatalf("fsync probe: %v", err)
	}
	b.Run("raw_fdatasync", func(b *testing.B) {
		r, err := commitbench.FsyncRate(dir, 300*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(r, "syncs/s")
	})
	for _, load := range commitbench.CommitLoads {
		sub := fmt.Sprintf("%s/submitters=%d/writes=%d", name, load.Submitters, load.Writes)
		if load.Follower != commitbench.NoFollower {
			sub += "/follower=" + load.Follower.String()
		}
		b.Run(sub, func(b *testing.B) {
			e, err := engine.Open(b.Context(), name, engine.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatalf("open: %v", err)
			}
			defer e.Close()
			b.ResetTimer()
			st, err := commitbench.RunCommits(e, load, max(b.N, load.Submitters))
			b.StopTimer()
			if err != nil {
				b.Fatalf("commits: %v", err)
			}
			b.ReportMetric(st.PerSecond(), "commits/s")
			b.ReportMetric(st.PerSecond()*float64(load.Writes), "writes/s")
			b.ReportMetric(float64(st.P99.Microseconds())/1000, "p99_ms")
			b.ReportMetric(st.PerSecond()/fsync, "x_fsync")
		})
	}
}
