package mqttbench

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// TestMergeRounds: a point of several rounds reports the round of the
// median rate, the median CPU figures, and the sum of every count, so a
// loss or a failure in any round shows.
func TestMergeRounds(t *testing.T) {
	rs := []Result{
		{PerSecond: 300, P50Ms: 3, Messages: 30, Measured: 20, Delivered: 30, ClientMicros: 30, BrokerMicros: 60},
		{PerSecond: 100, P50Ms: 1, Messages: 10, Measured: 8, Delivered: 9, Lost: 1, ClientMicros: 10, BrokerMicros: 20, ProtocolErrors: 2, ProtocolError: "first"},
		{PerSecond: 200, P50Ms: 2, Messages: 20, Measured: 15, Delivered: 20, ClientMicros: 20, BrokerMicros: 40, ProtocolErrors: 1, ProtocolError: "second"},
	}
	m := mergeRounds(rs)
	if m.PerSecond != 200 || m.P50Ms != 2 {
		t.Errorf("rate %v, p50 %v: want the median round's, 200 and 2", m.PerSecond, m.P50Ms)
	}
	if !slices.Equal(m.Rounds, []float64{300, 100, 200}) {
		t.Errorf("rounds %v, want each round's rate in run order", m.Rounds)
	}
	if m.Messages != 60 || m.Measured != 43 || m.Delivered != 59 || m.Lost != 1 || m.ProtocolErrors != 3 || m.ProtocolError != "first" {
		t.Errorf("counts not added up over the rounds: %+v", m)
	}
	if m.ClientMicros != 20 || m.BrokerMicros != 40 {
		t.Errorf("CPU %v / %v, want the medians 20 / 40", m.ClientMicros, m.BrokerMicros)
	}
	if m.Clean() {
		t.Error("a loss in one round left the point clean")
	}
	even := mergeRounds([]Result{{PerSecond: 4}, {PerSecond: 1, Err: "refused"}, {PerSecond: 3}, {PerSecond: 2}})
	if even.PerSecond != 2 || even.Err != "round 2 of 4: refused" {
		t.Errorf("even rounds: rate %v (want the lower middle, 2), err %q", even.PerSecond, even.Err)
	}
	if got := spread(m); got != "±50%" {
		t.Errorf("spread %q, want ±50%% (half of 300-100 over 200)", got)
	}
}

// TestRoundsRun runs one load in three rounds on two targets: the rounds
// take the targets in turn, every point reports its three rates, and the
// table says what its figures are.
func TestRoundsRun(t *testing.T) {
	var targets []Target
	for _, sync := range []engine.SyncMode{engine.SyncNone, engine.SyncAlways} {
		tm, err := Tidemark("pebble", engine.Options{Sync: sync})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tm)
	}
	load, err := ParseLoad("qos1-w1")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	rep, err := Run(t.Context(), Config{Targets: targets, Loads: []Load{load}, Duration: 100 * time.Millisecond, Rounds: 3,
		Dir: t.TempDir(), Progress: func(done, total int, next string) {
			if total != 6 {
				t.Errorf("progress total %d, want 2 targets x 3 rounds", total)
			}
			order = append(order, next)
		}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		targets[0].Label() + " QoS 1 w1 (round 1 of 3)", targets[1].Label() + " QoS 1 w1 (round 1 of 3)",
		targets[0].Label() + " QoS 1 w1 (round 2 of 3)", targets[1].Label() + " QoS 1 w1 (round 2 of 3)",
		targets[0].Label() + " QoS 1 w1 (round 3 of 3)", targets[1].Label() + " QoS 1 w1 (round 3 of 3)", ""}
	if !slices.Equal(order, want) {
		t.Errorf("points ran in the order\n%q\nwant\n%q", order, want)
	}
	if len(rep.Results) != 2 || rep.Rounds != 3 {
		t.Fatalf("%d results, %d rounds; want 2 and 3", len(rep.Results), rep.Rounds)
	}
	for _, r := range rep.Results {
		if !r.Clean() || len(r.Rounds) != 3 || r.PerSecond != median(r.Rounds) {
			t.Errorf("%s: clean %v, rounds %v, rate %v (want the median)", r.Target, r.Clean(), r.Rounds, r.PerSecond)
		}
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"spread", "the median of 3 rounds", "±"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}
