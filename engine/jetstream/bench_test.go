//go:build !nojetstream

package jetstream_test

import (
	"testing"

	"github.com/tidemark-io/tidemark/bench/benchtest"
)

// BenchmarkCommits runs the shared commit benchmark (synced commits of
// 64-byte values from 1, 16 and 64 submitters) against the embedded
// server. Gathering concurrent commits into one atomic batch is what makes
// the rate grow with the submitters.
func BenchmarkCommits(b *testing.B) {
	benchtest.Commits(b, "jetstream")
}

func BenchmarkSlots(b *testing.B) {
	benchtest.Slots(b, "jetstream")
}

// BenchmarkReopenMemory reports the heap in use and the resident set after
// reopening a store of 50,000 values of 1 KB (benchtest.ReopenMemory), with
// one writer (commit=wal) and on a shared stream (commit=batch).
func BenchmarkReopenMemory(b *testing.B) {
	for _, mode := range []string{"wal", "batch"} {
		b.Run("commit="+mode, func(b *testing.B) {
			benchtest.ReopenMemory(b, "jetstream", map[string]string{"commit": mode})
		})
	}
}
