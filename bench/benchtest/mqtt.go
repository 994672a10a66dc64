// Package benchtest runs the bench tooling as Go benchmarks, so that
// `go test -bench` measures the same loads as `tidemark bench` while the
// tidemark binary links no testing code.
package benchtest

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/bench/mqttbench"
)

// MQTT runs each load on target as a sub-benchmark of b ("qos2-w256"),
// each iteration one point of d seconds of sending, and reports msgs/s,
// the p50 and p99 acknowledgement latency and the subscriber's lost and
// duplicated-or-reordered counts of the last iteration. A point that fails
// to run fails the benchmark; one that lost, duplicated or reordered a
// message is logged (mqttbench's TestQuickRun is what fails on those:
// a benchmark keeps its figures). before, when set, runs as each
// iteration starts (a profiler, say).
func MQTT(b *testing.B, target mqttbench.Target, loads []mqttbench.Load, d time.Duration, before func(b *testing.B)) {
	for _, l := range loads {
		b.Run(l.Name(), func(b *testing.B) {
			var last mqttbench.Result
			for b.Loop() {
				if before != nil {
					before(b)
				}
				rep, err := mqttbench.Run(b.Context(), mqttbench.Config{Targets: []mqttbench.Target{target}, Loads: []mqttbench.Load{l}, Duration: d, Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				last = rep.Results[0]
				if last.Err != "" {
					b.Fatalf("%s: %s", l, last.Err)
				}
				if !last.Clean() {
					b.Logf("%s", rep.Summary())
				}
			}
			b.ReportMetric(last.PerSecond, "msgs/s")
			b.ReportMetric(last.P50Ms, "p50-ms")
			b.ReportMetric(last.P99Ms, "p99-ms")
			b.ReportMetric(float64(last.Lost), "lost")
			b.ReportMetric(float64(last.Duplicates+last.Reordered), "dup+reord")
			b.ReportMetric(0, "ns/op")
		})
	}
}
