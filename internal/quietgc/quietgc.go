// Package quietgc brings a garbage collection that is due soon forward to
// a moment the process is quiet.
//
// The Go collector starts a cycle when the heap reaches its goal, whatever
// the process is doing then. A broker's work comes in bursts (a connect
// storm, then quiet, then a wave of messages), and a cycle that starts at
// the head of a burst marks the whole live heap while the burst runs: on
// a fleet of 19,000 sessions that is about half a second in which the
// collector takes a quarter of the cores and its assists stretch every
// delivery. Collecting in the quiet spell before, once most of the
// headroom is used, lets the burst start with all of it.
package quietgc

import (
	"context"
	"log/slog"
	"runtime"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/tidemark-io/tidemark/internal/proc"
)

// Options tune Run; the zero value of a field takes its default.
type Options struct {
	// Every is how often the process's CPU time and heap are read
	// (default 250 ms). A period is quiet when the process used less than
	// Quiet of one core in it.
	Every time.Duration
	// Quiet is the share of one core below which a period counts as quiet
	// (default 0.05).
	Quiet float64
	// Used is the share of the headroom (the heap goal less the heap live
	// at the last collection) that must be allocated since the last
	// collection for an early one to pay (default 0.5): below it, the next
	// burst has most of the headroom anyway, and collecting early would
	// only collect more often.
	Used float64
	// Logger gets a debug line per collection brought forward (default
	// slog.Default()).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Every <= 0 {
		o.Every = 250 * time.Millisecond
	}
	if o.Quiet <= 0 {
		o.Quiet = 0.05
	}
	if o.Used <= 0 {
		o.Used = 0.5
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Heap is what Run reads of the heap, in bytes.
type Heap struct {
	// Live is the heap that was live at the end of the last collection.
	Live uint64
	// Goal is the heap size at which the collector starts the next cycle.
	Goal uint64
	// Objects is the heap's objects now, live and garbage.
	Objects uint64
}

// Due reports whether a collection now would take back at least used of
// the headroom (Goal-Live).
func (h Heap) Due(used float64) bool {
	if h.Goal <= h.Live || h.Objects <= h.Live {
		return false
	}
	return float64(h.Objects-h.Live) >= used*float64(h.Goal-h.Live)
}

// ReadHeap reads the heap's figures from the runtime.
func ReadHeap() Heap {
	s := []rtmetrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	rtmetrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return Heap{Live: v(0), Goal: v(1), Objects: v(2)}
}

// Run collects whenever a period of o.Every was quiet and the heap is
// Due, until ctx ends. It returns how many collections it ran.
func Run(ctx context.Context, o Options) int {
	o.defaults()
	t := time.NewTicker(o.Every)
	defer t.Stop()
	ran := 0
	last, lastAt := proc.SelfCPU(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ran
		case <-t.C:
		}
		now, at := proc.SelfCPU(), time.Now()
		used, period := now-last, at.Sub(lastAt)
		last, lastAt = now, at
		if now == 0 || float64(used) >= o.Quiet*float64(period) {
			continue
		}
		h := ReadHeap()
		if !h.Due(o.Used) {
			continue
		}
		start := time.Now()
		runtime.GC()
		ran++
		after := ReadHeap()
		o.Logger.Debug("collected while quiet", "heap_before", h.Objects, "heap_after", after.Objects, "live", after.Live, "took", time.Since(start))
		// The collection's own CPU is not the process's load.
		last, lastAt = proc.SelfCPU(), time.Now()
	}
}
