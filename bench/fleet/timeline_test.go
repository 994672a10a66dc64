package fleet

import (
	"strings"
	"testing"
	"time"
)

// Deliveries land in the window of their publication time, windows come
// in order without empty ones, and each states its count, percentiles,
// maximum and slow deliveries.
func TestTimeline(t *testing.T) {
	start := time.Now()
	ms := time.Millisecond
	var ss []sample
	for i := range 10 { // window 0: 10 quick ones
		ss = append(ss, sample{sent: start.Add(time.Duration(i) * ms), lat: time.Duration(i+1) * ms})
	}
	ss = append(ss, sample{sent: start.Add(250 * ms), lat: 80 * ms}, sample{sent: start.Add(299 * ms), lat: 20 * ms})
	ss = append(ss, sample{sent: start.Add(-5 * ms), lat: 3 * ms}) // before the start: window 0
	ws := timeline(ss, start, 100*ms)
	if len(ws) != 2 {
		t.Fatalf("windows %+v, want two (0 and 200 ms)", ws)
	}
	if w := ws[0]; w.From != 0 || w.Count != 11 || w.Max != 10*ms || w.Slow != 0 || w.P50 != 5*ms {
		t.Fatalf("first window %+v", w)
	}
	if w := ws[1]; w.From != 200*ms || w.Count != 2 || w.Max != 80*ms || w.Slow != 1 || w.P99 != 80*ms {
		t.Fatalf("second window %+v", w)
	}
	out := TimelineTable([]Result{{Broker: "b", Sessions: 3, Timeline: ws}})
	if !strings.Contains(out, "| 200ms | 2 | 80ms | 80ms | 80ms | 1 |") {
		t.Fatalf("table:\n%s", out)
	}
}
