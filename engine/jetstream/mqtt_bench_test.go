//go:build !nojetstream

package jetstream_test

import (
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
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
// engine and the embedded nats-server together. It reports msgs/s, the
// acknowledgement latency and the subscriber's lost and duplicated
// counts. With TIDEMARK_BENCH_CPUPROFILE set it also writes a CPU profile
// of the sending phase (see profileSending).
func BenchmarkMQTT(b *testing.B) {
	tm, err := mqttbench.Tidemark("jetstream", engine.Options{Sync: engine.SyncInterval})
	if err != nil {
		b.Fatal(err)
	}
	benchtest.MQTT(b, tm, []mqttbench.Load{
		{QoS: 1, Window: 1, Conns: 1},
		{QoS: 1, Window: 16, Conns: 1},
		{QoS: 1, Window: 256, Conns: 1},
		{QoS: 2, Window: 1, Conns: 1},
		{QoS: 2, Window: 16, Conns: 1},
		{QoS: 2, Window: 256, Conns: 1},
	}, 2*time.Second, func(b *testing.B) {
		if path := os.Getenv("TIDEMARK_BENCH_CPUPROFILE"); path != "" {
			go profileSending(b, path)
		}
	})
}
