package mqttbench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/table"
)

// PartitionsConfig is a run of PartitionsRun: table commits to K
// partitions, one stream each, on a NATS cluster on loopback.
type PartitionsConfig struct {
	// Partitions are the partition counts to measure, e.g. 1, 2, 3; each
	// gets a fresh NATS cluster.
	Partitions []int
	// Servers is the NATS cluster's size and Replicas each stream's.
	// Partition i's stream is led by server i mod Servers.
	Servers, Replicas int
	// Committers commit at Window transactions in flight each; a
	// transaction writes one record of Payload bytes (and its log entry)
	// to the partition of a random key.
	Committers, Window, Payload int
	// Duration is the measured time of each point, after a warm-up of a
	// fifth of it.
	Duration time.Duration
	// Dir holds the servers' and engines' data.
	Dir string
	// Progress, when set, is told what runs next.
	Progress func(string)
}

// PartitionsResult is one point of PartitionsRun.
type PartitionsResult struct {
	Partitions int
	// Leaders names the server leading each partition's stream.
	Leaders []string
	// PerSecond is completed commits per second over the measured time,
	// all partitions together.
	PerSecond    float64
	Commits      int
	P50Ms, P99Ms float64
	// Micros is this process's CPU time per commit over the measured
	// time: the committers, the engines and the NATS servers together.
	Micros float64
	Err    error
}

// PartitionsRun measures the commit throughput of partitioned tables
// (table.OpenPartitions) on the JetStream engine: with K partitions the
// commits go to K streams, each led by another server, which is how a
// Tidemark deployment's storage grows with its NATS cluster.
func PartitionsRun(ctx context.Context, cfg PartitionsConfig) []PartitionsResult {
	var out []PartitionsResult
	for _, k := range cfg.Partitions {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf("%d partition(s) on %d NATS servers (R%d), %d committers at window %d",
				k, cfg.Servers, cfg.Replicas, cfg.Committers, cfg.Window))
		}
		out = append(out, partitionsPoint(ctx, cfg, k))
		if ctx.Err() != nil {
			return out
		}
	}
	return out
}

func partitionsPoint(ctx context.Context, cfg PartitionsConfig, k int) (r PartitionsResult) {
	r = PartitionsResult{Partitions: k}
	if _, err := engine.Lookup("jetstream"); err != nil {
		r.Err = err
		return r
	}
	r.Err = onCluster(cfg.Dir, fmt.Sprintf("partitions-%d-", k), cfg.Servers, func(tb *runTB, _, urls string) error {
		var es []engine.Engine
		defer func() {
			for _, e := range es {
				_ = e.Close()
			}
		}()
		for i := range k {
			params := map[string]string{"url": urls, "replicas": strconv.Itoa(cfg.Replicas), "stream": fmt.Sprintf("part%d", i)}
			leader := fmt.Sprintf("n%d", i%cfg.Servers+1) // the cluster's server names
			if cfg.Replicas > 1 {
				params["leader"] = leader
				r.Leaders = append(r.Leaders, leader)
			}
			e, err := engine.Open(ctx, "jetstream", engine.Options{Dir: tb.TempDir(), Params: params})
			if err != nil {
				return fmt.Errorf("open partition %d: %w", i, err)
			}
			es = append(es, e)
		}
		p, err := table.OpenPartitions(ctx, es, table.Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		return loadPartitions(ctx, cfg, p, &r)
	})
	return r
}

// loadPartitions runs the committers of one point.
func loadPartitions(ctx context.Context, cfg PartitionsConfig, p *table.Partitions, r *PartitionsResult) error {
	value := make([]byte, cfg.Payload)
	warm := time.Now().Add(cfg.Duration / 5)
	end := warm.Add(cfg.Duration)
	var mu sync.Mutex
	var lat []time.Duration
	var errs []error
	var cpu time.Duration
	cpuDone := make(chan struct{})
	go func() {
		defer close(cpuDone)
		time.Sleep(time.Until(warm))
		cpu0 := proc.SelfCPU()
		time.Sleep(time.Until(end))
		cpu = proc.SelfCPU() - cpu0
	}()
	var wg sync.WaitGroup
	for c := range cfg.Committers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			type inflight struct {
				h  *engine.Handle
				at time.Time
			}
			var q []inflight
			var mine []time.Duration
			wait := func() error {
				f := q[0]
				q = q[1:]
				if _, err := f.h.Wait(ctx); err != nil {
					return err
				}
				if now := time.Now(); f.at.After(warm) && now.Before(end) {
					mine = append(mine, now.Sub(f.at))
				}
				return nil
			}
			var err error
			for n := 0; time.Now().Before(end) && err == nil; n++ {
				if len(q) == cfg.Window {
					if err = wait(); err != nil {
						break
					}
				}
				id := fmt.Sprintf("c%d-%d", c, n%1000)
				tx := p.For(id).Begin()
				_ = tx.Put("bench", id, value)
				at := time.Now()
				var h *engine.Handle
				if h, err = tx.Submit(ctx); err == nil {
					q = append(q, inflight{h, at})
				}
			}
			for len(q) > 0 && err == nil {
				err = wait()
			}
			mu.Lock()
			lat = append(lat, mine...)
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	<-cpuDone
	if len(errs) > 0 {
		return fmt.Errorf("%d committers failed, first: %w", len(errs), errs[0])
	}
	slices.Sort(lat)
	r.Commits = len(lat)
	r.PerSecond = float64(len(lat)) / cfg.Duration.Seconds()
	if len(lat) > 0 {
		r.P50Ms = float64(lat[len(lat)/2]) / 1e6
		r.P99Ms = float64(lat[len(lat)*99/100]) / 1e6
		r.Micros = float64(cpu.Microseconds()) / float64(len(lat))
	}
	return nil
}

// WritePartitionsTable prints the points as a table, with each point's
// throughput against one partition's in the same run.
func WritePartitionsTable(w io.Writer, rs []PartitionsResult) error {
	var one float64
	for _, r := range rs {
		if r.Partitions == 1 && r.Err == nil {
			one = r.PerSecond
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partitions\tleaders\tcommits/s\tx 1 partition\tp50 ms\tp99 ms\tcommits\tCPU µs/commit\t")
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(tw, "%d\terror: %s\t\t\t\t\t\t\t\n", r.Partitions, strings.ReplaceAll(r.Err.Error(), "\t", " "))
			continue
		}
		x := "-"
		if one > 0 {
			x = fmt.Sprintf("%.2f", r.PerSecond/one)
		}
		leaders := strings.Join(r.Leaders, ",")
		if leaders == "" {
			leaders = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%.2f\t%.2f\t%d\t%.1f\t\n", r.Partitions, leaders, r.PerSecond, x, r.P50Ms, r.P99Ms, r.Commits, r.Micros)
	}
	return tw.Flush()
}
