package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// sample is one delivery: when its message was published and how long it
// took to arrive.
type sample struct {
	sent time.Time
	lat  time.Duration
}

// timelineStep is the width of a Timeline window.
const timelineStep = 100 * time.Millisecond

// Window is the deliveries of messages published in one window of a load.
type Window struct {
	// From is the window's start, from the start of the load.
	From          time.Duration
	Count         int
	P50, P99, Max time.Duration
	// Slow counts deliveries that took over 50 ms.
	Slow int
}

// timeline puts samples in windows of step by publication time from
// start, in order, leaving out empty windows.
func timeline(samples []sample, start time.Time, step time.Duration) []Window {
	byWindow := map[int64][]time.Duration{}
	for _, s := range samples {
		k := int64(max(0, s.sent.Sub(start)) / step)
		byWindow[k] = append(byWindow[k], s.lat)
	}
	keys := make([]int64, 0, len(byWindow))
	for k := range byWindow {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Window, 0, len(keys))
	for _, k := range keys {
		ls := byWindow[k]
		slices.Sort(ls)
		w := Window{From: time.Duration(k) * step, Count: len(ls), P50: percentile(ls, 0.50), P99: percentile(ls, 0.99), Max: ls[len(ls)-1]}
		for _, l := range ls {
			if l > 50*time.Millisecond {
				w.Slow++
			}
		}
		out = append(out, w)
	}
	return out
}

// TimelineTable renders the spread timeline of each result as Markdown.
func TimelineTable(rs []Result) string {
	var b strings.Builder
	for _, r := range rs {
		if len(r.Timeline) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nSpread deliveries of %s at %d sessions, by when their message was published:\n\n", r.Broker, r.Sessions)
		b.WriteString("| published at | deliveries | p50 | p99 | max | over 50 ms |\n|---|---|---|---|---|---|\n")
		for _, w := range r.Timeline {
			fmt.Fprintf(&b, "| %v | %d | %v | %v | %v | %d |\n", w.From, w.Count, w.P50.Round(10*time.Microsecond),
				w.P99.Round(10*time.Microsecond), w.Max.Round(10*time.Microsecond), w.Slow)
		}
	}
	return b.String()
}
