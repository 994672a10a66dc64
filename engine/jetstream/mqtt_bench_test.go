package jetstream_test

import (
	"fmt"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/mqttbench"
)

// profileSending writes a CPU profile of the middle of a point's sending
// phase to path: -cpuprofile also covers the subscriber draining the
// backlog afterwards, which is a different load.
func profileSending(b *testing.B, path string) {
	time.Sleep(700 * time.Millisecond)
	out, err := os.Create(path)
	if err != nil {
		b.Error(err)
		return
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		b.Error(err)
		return
	}
	time.Sleep(1200 * time.Millisecond)
	pprof.StopCPUProfile()
}

// BenchmarkMQTT drives the MQTT bench's QoS 1 and QoS 2 points through
// Tidemark on this engine (embedded server, sync interval), in this
// process, so a CPU profile taken with -cpuprofile covers the broker, the
// engine and the embedded nats-server together. It reports msgs/s and the
// acknowledgement latency, and fails on lost, duplicated or reordered
// messages. With TIDEMARK_BENCH_CPUPROFILE set it also writes a CPU
// profile of the sending phase (see profileSending).
func BenchmarkMQTT(b *testing.B) {
	tm, err := mqttbench.Tidemark("jetstream", engine.SyncInterval, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range []mqttbench.Load{
		{QoS: 1, Window: 1, Conns: 1},
		{QoS: 1, Window: 16, Conns: 1},
		{QoS: 1, Window: 256, Conns: 1},
		{QoS: 2, Window: 1, Conns: 1},
		{QoS: 2, Window: 16, Conns: 1},
		{QoS: 2, Window: 256, Conns: 1},
	} {
		b.Run(fmt.Sprintf("qos%d-w%d", l.QoS, l.Window), func(b *testing.B) {
			var last mqttbench.Result
			for b.Loop() {
				if path := os.Getenv("TIDEMARK_BENCH_CPUPROFILE"); path != "" {
					go profileSending(b, path)
				}
				rep, err := mqttbench.Run(b.Context(), mqttbench.Config{Targets: []mqttbench.Target{tm}, Loads: []mqttbench.Load{l}, Duration: 2 * time.Second, Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				last = rep.Results[0]
				if last.Err != "" {
					b.Fatalf("%s: %s", l, last.Err)
				}
				if !last.Clean() {
					b.Errorf("%s", rep.Summary())
				}
			}
			b.ReportMetric(last.PerSecond, "msgs/s")
			b.ReportMetric(last.P50Ms, "p50-ms")
			b.ReportMetric(last.P99Ms, "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
