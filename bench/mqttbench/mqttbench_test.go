package mqttbench

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

// quickTargets are Tidemark on Pebble and every peer, at sync always. The
// mosquitto peer needs the broker installed (.ci/run installs it).
func quickTargets(t testing.TB) []Target {
	t.Helper()
	tm, err := Tidemark("pebble", engine.Options{Sync: engine.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	targets := []Target{tm}
	for _, name := range Peers {
		p, err := Peer(name, engine.SyncAlways, 0)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, p)
	}
	return targets
}

// TestQuickRun runs the quick load end to end on Pebble and every peer and
// checks that every acknowledged message arrived exactly once, in order,
// and that the report holds every point with sane figures.
func TestQuickRun(t *testing.T) {
	targets := quickTargets(t)
	loads := Loads(true)
	var progress []int
	rep, err := Run(t.Context(), Config{Targets: targets, Loads: loads, Duration: 100 * time.Millisecond,
		Dir: t.TempDir(), Progress: func(done, total int, _ string) { progress = append(progress, done) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(targets) * len(loads); len(rep.Results) != want {
		t.Fatalf("%d results, want %d", len(rep.Results), want)
	}
	// One call before each point, one before the warm-up of each load of
	// several connections, one at the end.
	warmups := 0
	for _, l := range loads {
		if l.Conns > 1 {
			warmups++
		}
	}
	if len(progress) != len(rep.Results)+warmups+1 || progress[0] != 0 || progress[len(progress)-1] != len(rep.Results) {
		t.Errorf("progress calls %v", progress)
	}
	for _, r := range rep.Results {
		if !r.Clean() {
			t.Errorf("%s %s: err=%q lost=%d dup=%d reordered=%d protocol errors=%d %s", r.Target, r.Load, r.Err, r.Lost, r.Duplicates, r.Reordered, r.ProtocolErrors, r.ProtocolError)
		}
		if r.Messages < r.Load.Conns || r.PerSecond <= 0 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms {
			t.Errorf("%s %s: implausible figures %+v", r.Target, r.Load, r)
		}
		// The rate runs to the last delivery: never above the
		// acknowledgements' own, and below it by what delivery trailed.
		if r.AckedPerSecond < r.PerSecond || r.BehindMs < 0 ||
			(r.BehindMs == 0) != (r.AckedPerSecond == r.PerSecond) {
			t.Errorf("%s %s: %.0f msgs/s, %.0f acknowledged, %.1f ms behind", r.Target, r.Load, r.PerSecond, r.AckedPerSecond, r.BehindMs)
		}
		// Deliveries after the warm-up are timed: Tidemark, here, makes
		// some at every point (a slow peer may have made all of its own
		// before the end of a 100 ms point's warm-up).
		if (r.Timed > 0 && (r.DeliveryP50Ms <= 0 || r.DeliveryP99Ms < r.DeliveryP50Ms)) ||
			(strings.HasPrefix(r.Target, "tidemark/") && r.Timed == 0) {
			t.Errorf("%s %s: %d deliveries timed, p50 %.3f ms, p99 %.3f ms", r.Target, r.Load, r.Timed, r.DeliveryP50Ms, r.DeliveryP99Ms)
		}
		if r.Measured <= 0 || r.Measured > r.Messages {
			t.Errorf("%s %s: %d measured of %d acknowledged", r.Target, r.Load, r.Measured, r.Messages)
		}
		if r.Delivered != r.Messages {
			t.Errorf("%s %s: %d delivered, %d acknowledged", r.Target, r.Load, r.Delivered, r.Messages)
		}
		// Every row is compared with every peer, and a peer's own row
		// with itself.
		for _, p := range peerRatios {
			v := *p.ratio(&r)
			if v <= 0 || (r.Kind == p.kind && v != 1) {
				t.Errorf("%s %s: x %s = %v", r.Target, r.Load, p.name, v)
			}
		}
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	t.Log("\n" + table)
	for _, l := range loads {
		for _, tg := range targets {
			if !containsRow(table, l.String(), tg.Label()) {
				t.Errorf("table has no row for %s %s", tg.Label(), l)
			}
		}
	}
	for _, want := range []string{"msgs/s", "p99 ms", "x nats", "x mochi", "x mosquitto", "sync_always", "SyncWrites off", "persistence off"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(table, "FAIL") {
		t.Errorf("table reports a failure")
	}
	for _, name := range []string{"chart.svg", "chart.png"} {
		path := filepath.Join(t.TempDir(), name)
		if err := rep.WriteChart(path); err != nil {
			t.Fatalf("chart: %v", err)
		}
	}
}

func containsRow(table, load, target string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if strings.HasPrefix(strings.TrimSpace(line), load+" ") && strings.Contains(line, " "+target+" ") && len(f) > 4 {
			return true
		}
	}
	return false
}

func TestWriteChartRejectsUnknownFormat(t *testing.T) {
	rep := &Report{Results: []Result{{Target: "x", Load: Load{QoS: 1, Window: 1, Conns: 1}, PerSecond: 10}}}
	err := rep.WriteChart(filepath.Join(t.TempDir(), "c.jpg"))
	if err == nil || !strings.Contains(err.Error(), ".svg or .png") {
		t.Fatalf("got %v", err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram has a median")
	}
	var vals []time.Duration
	for range 10000 {
		d := time.Duration(rand.Int64N(int64(50 * time.Millisecond)))
		vals = append(vals, d)
		h.add(d)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.99} {
		exact := vals[int(q*float64(len(vals)))-1]
		got := h.quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.02 || diff < -0.02 {
			t.Errorf("q%.2f = %v, exact %v", q, got, exact)
		}
	}
	for v := uint64(0); v < 1<<20; v += 7 {
		if i := histBucket(v); histBucket(histValue(i)) != i {
			t.Fatalf("bucket %d of %d does not hold its middle %d", i, v, histValue(i))
		}
	}
}

func TestBitset(t *testing.T) {
	var a, b bitset
	for _, i := range []uint64{0, 63, 64, 1000} {
		if a.set(i) {
			t.Fatalf("%d present before set", i)
		}
	}
	if !a.set(64) || a.count() != 4 {
		t.Fatalf("count %d", a.count())
	}
	b.set(63)
	b.set(1000)
	if m := a.missing(b); m != 2 {
		t.Fatalf("missing %d, want 2", m)
	}
	if m := b.missing(a); m != 0 {
		t.Fatalf("missing %d, want 0", m)
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	b := make([]byte, PayloadSize)
	at := time.Unix(1_700_000_000, 123_456_789)
	encodePayload(b, 7, 3, 1<<40, at)
	run, pub, seq, sent, ok := decodePayload(b)
	if !ok || run != 7 || pub != 3 || seq != 1<<40 || !sent.Equal(at) {
		t.Fatalf("got %d %d %d %v %v", run, pub, seq, sent, ok)
	}
	for _, bad := range [][]byte{nil, b[:10], append(slices.Clone(b), 0), append([]byte("XXXX"), b[4:]...)} {
		if _, _, _, _, ok := decodePayload(bad); ok {
			t.Fatalf("accepted %q", bad)
		}
	}
}

func TestParseLoad(t *testing.T) {
	for _, l := range append(Loads(false), Loads(true)...) {
		got, err := ParseLoad(l.Name())
		if err != nil || got != l {
			t.Errorf("ParseLoad(%q) = %+v, %v; want %+v", l.Name(), got, err, l)
		}
	}
	for _, s := range []string{"", "qos3-w1", "qos1-w0", "qos1", "qos1-w16-x0", "qos1-w16-x5y", "qos1-w16x5", "QoS 1 w16", "qos1-w70000"} {
		if l, err := ParseLoad(s); err == nil {
			t.Errorf("ParseLoad(%q) = %+v, want an error", s, l)
		}
	}
}
