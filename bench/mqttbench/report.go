package mqttbench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of a run.
type Report struct {
	// Duration is the measured send phase of each point.
	Duration time.Duration `json:"duration_ns"`
	// Warmup is the unmeasured send phase before it.
	Warmup time.Duration `json:"warmup_ns"`
	// Rounds is how many times each point ran (see Config.Rounds).
	Rounds int `json:"rounds"`
	// Targets are the brokers driven, with what each fsyncs.
	Targets []Target `json:"targets"`
	// Results holds one entry per target and load, in run order.
	Results []Result `json:"results"`
}

// peerRatios are the peers results are compared with, in column order,
// each with the name its column carries and the Result field holding the
// ratio.
var peerRatios = []struct {
	kind  Kind
	name  string
	ratio func(*Result) *float64
}{
	{KindNATS, "nats", func(r *Result) *float64 { return &r.VsNATS }},
	{KindMochi, "mochi", func(r *Result) *float64 { return &r.VsMochi }},
	{KindMosquitto, "mosquitto", func(r *Result) *float64 { return &r.VsMosquitto }},
}

// compare fills each result's ratios to the peers at the same load.
// nats-server is matched on the sync mode too; a target without one
// (mochi, mosquitto) is compared with nats-server only when a single mode
// ran.
func (rep *Report) compare() {
	type key struct {
		kind Kind
		load Load
		sync string // nats-server's only
	}
	peer := map[key]float64{}
	natsSyncs := map[string]bool{}
	for _, r := range rep.Results {
		if r.Err != "" || r.PerSecond == 0 || r.Kind == KindTidemark {
			continue
		}
		k := key{kind: r.Kind, load: r.Load}
		if r.Kind == KindNATS {
			k.sync = r.Sync
			natsSyncs[r.Sync] = true
		}
		peer[k] = r.PerSecond
	}
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Err != "" {
			continue
		}
		sync := r.Sync
		if sync == "" && len(natsSyncs) == 1 {
			for s := range natsSyncs {
				sync = s
			}
		}
		for _, p := range peerRatios {
			k := key{kind: p.kind, load: r.Load}
			if p.kind == KindNATS {
				k.sync = sync
			}
			if v := peer[k]; v > 0 {
				*p.ratio(r) = r.PerSecond / v
			}
		}
	}
}

// ratioColumns are the entries of peerRatios for the peers in the report.
func (rep *Report) ratioColumns() []int {
	ran := map[Kind]bool{}
	for _, t := range rep.Targets {
		ran[t.Kind] = true
	}
	for _, r := range rep.Results {
		ran[r.Kind] = true
	}
	var cols []int
	for i, p := range peerRatios {
		if ran[p.kind] {
			cols = append(cols, i)
		}
	}
	return cols
}

// Clean reports whether every point ran and delivered every acknowledged
// message exactly once and in order.
func (rep *Report) Clean() bool {
	for _, r := range rep.Results {
		if !r.Clean() {
			return false
		}
	}
	return true
}

// WriteTable prints the results grouped by load, with a ratio column per
// peer in the report, then what each target fsyncs and how to read the
// columns.
func (rep *Report) WriteTable(w io.Writer) error {
	cols := rep.ratioColumns()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rounds := rep.Rounds > 1
	extra := 0
	fmt.Fprintf(tw, "load\ttarget\tmsgs/s\t")
	if rounds {
		extra = 1
		fmt.Fprintf(tw, "spread\t")
	}
	fmt.Fprintf(tw, "p50 ms\tp99 ms\tdeliv p99 ms\tbehind ms\tlost\tdup\treord\t")
	var names []string
	for _, c := range cols {
		names = append(names, "x "+peerRatios[c].name)
		fmt.Fprintf(tw, "x %s\t", peerRatios[c].name)
	}
	fmt.Fprintln(tw)
	blank := strings.Repeat("\t", 10+extra+len(cols))
	var prev Load
	var failed []string
	for i, r := range rep.Results {
		if i > 0 && r.Load != prev {
			fmt.Fprintln(tw, blank)
		}
		prev = r.Load
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%s\tFAILED%s\n", r.Load, r.Target, blank[3:])
			failed = append(failed, fmt.Sprintf("%s %s: %s", r.Target, r.Load, r.Err))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t", r.Load, r.Target, r.PerSecond)
		if rounds {
			fmt.Fprintf(tw, "%s\t", spread(r))
		}
		fmt.Fprintf(tw, "%.2f\t%.2f\t%.2f\t%.0f\t%d\t%d\t%d\t", r.P50Ms, r.P99Ms, r.DeliveryP99Ms, r.BehindMs, r.Lost, r.Duplicates, r.Reordered)
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", ratio(*peerRatios[c].ratio(&r)))
		}
		fmt.Fprintln(tw)
		if r.Unacked > 0 || r.ProtocolErrors > 0 {
			line := fmt.Sprintf("%s %s: %d unacknowledged at the end, %d protocol errors", r.Target, r.Load, r.Unacked, r.ProtocolErrors)
			if r.ProtocolError != "" {
				line += " (the first: " + r.ProtocolError + ")"
			}
			failed = append(failed, line)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range failed {
		fmt.Fprintln(w, "FAIL", f)
	}
	fmt.Fprintf(w, "\n%d-byte payloads, MQTT 3.1.1, %v of sending measured per point after %v of warm-up, each point on a fresh broker on 127.0.0.1.\n", PayloadSize, rep.Duration, rep.Warmup)
	if rounds {
		fmt.Fprintf(w, "msgs/s: the median of %d rounds, each load run on every target once per round, in turn; spread: half the range of the rounds' rates, over the median. Latencies are the median round's.\n", rep.Rounds)
	}
	fmt.Fprintln(w, "window: PUBLISHes kept unacknowledged per connection (QoS 0: not yet delivered); xN: N connections.")
	fmt.Fprintln(w, "msgs/s: messages sent after the warm-up, over the time until the last of them was acknowledged and delivered; behind: how long the last delivery came after the last acknowledgement (a subscriber left behind lowers the rate).")
	fmt.Fprintln(w, "latency: PUBLISH to PUBACK (QoS 1) or PUBCOMP (QoS 2); QoS 0: PUBLISH to delivery. deliv p99: PUBLISH to its delivery to the subscriber, the 99th percentile.")
	fmt.Fprintln(w, "lost: acknowledged (QoS 0: sent) but never delivered; dup: delivered twice; reord: delivered after a later message.")
	if len(names) > 0 {
		note := ""
		if peerRatios[cols[0]].kind == KindNATS {
			note = " (nats-server at the same sync setting)"
		}
		fmt.Fprintf(w, "%s: msgs/s over the peer's at the same load%s.\n", strings.Join(names, ", "), note)
	}
	if c := rep.clientCost(); c != "" {
		of := ""
		if rounds {
			of = " (the medians of the rounds')"
		}
		fmt.Fprintf(w, "CPU per exchange of the load generator (publishers and subscriber) and, in brackets, of the broker, where the broker ran in a process of its own%s: %s.\n", of, c)
	}
	fmt.Fprintln(w, "\nWhat an acknowledgement means on disk:")
	for _, t := range rep.Targets {
		fmt.Fprintf(w, "  %s: %s.\n", t.Label(), t.Durability)
	}
	return nil
}

// spread is half the range of r's rounds' rates over its median rate, as
// "±4%"; "-" when it has none.
func spread(r Result) string {
	if len(r.Rounds) < 2 || r.PerSecond <= 0 {
		return "-"
	}
	lo, hi := slices.Min(r.Rounds), slices.Max(r.Rounds)
	return fmt.Sprintf("±%.0f%%", (hi-lo)/2/r.PerSecond*100)
}

func ratio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// WriteJSON writes the report as one indented JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// Curve is one target's single-connection throughput at each window for
// one QoS.
type Curve struct {
	Target string
	QoS    byte
	Window []int
	PerSec []float64
}

// Curves returns the window curves: per QoS, per target, msgs/s against the
// window of the single-connection points that ran.
func (rep *Report) Curves() []Curve {
	var out []Curve
	idx := map[string]int{}
	for _, r := range rep.Results {
		if r.Load.Conns != 1 || r.Err != "" || r.PerSecond == 0 {
			continue
		}
		k := fmt.Sprintf("%d\x00%s", r.Load.QoS, r.Target)
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Curve{Target: r.Target, QoS: r.Load.QoS})
		}
		out[i].Window = append(out[i].Window, r.Load.Window)
		out[i].PerSec = append(out[i].PerSec, r.PerSecond)
	}
	return out
}

// clientCost lists the CPU per exchange of the load generator and of the
// broker at each point where they were measured, e.g. "mosquitto QoS 1
// w1 31.2 µs (broker 47.0 µs)".
func (rep *Report) clientCost() string {
	var parts []string
	for _, r := range rep.Results {
		if r.ClientMicros > 0 {
			parts = append(parts, fmt.Sprintf("%s %s %.1f µs (broker %.1f µs)", r.Target, r.Load, r.ClientMicros, r.BrokerMicros))
		}
	}
	return strings.Join(parts, ", ")
}

// Summary is one line per failed or unclean point; empty when all is well.
func (rep *Report) Summary() string {
	var b strings.Builder
	for _, r := range rep.Results {
		if !r.Clean() {
			fmt.Fprintf(&b, "%s %s: err=%q lost=%d dup=%d reord=%d unacked=%d protocol=%d", r.Target, r.Load, r.Err, r.Lost, r.Duplicates, r.Reordered, r.Unacked, r.ProtocolErrors)
			if r.ProtocolError != "" {
				fmt.Fprintf(&b, " (the first: %s)", r.ProtocolError)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}
