package benchtest_test

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

// BenchmarkPebble measures one QoS 1 and one QoS 2 point on Tidemark over
// Pebble at sync always, reporting msgs/s and ack latency, and the
// subscriber's lost, duplicated and reordered counts (mqttbench's
// TestQuickRun is what fails on those; a benchmark keeps its figures).
func BenchmarkPebble(b *testing.B) {
	tm, err := mqttbench.Tidemark("pebble", engine.Options{Sync: engine.SyncAlways})
	if err != nil {
		b.Fatal(err)
	}
	benchtest.MQTT(b, tm, []mqttbench.Load{{QoS: 1, Window: 256, Conns: 1}, {QoS: 2, Window: 256, Conns: 1}}, time.Second, nil)
}

// BenchmarkReopenMemoryPebble is benchtest.ReopenMemory on Pebble, the
// figure to compare the other engines' with.
func BenchmarkReopenMemoryPebble(b *testing.B) {
	benchtest.ReopenMemory(b, "pebble", nil)
}
