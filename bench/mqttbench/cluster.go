package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// ClusterConfig is a run of ClusterRun: Tidemark nodes on the JetStream
// engine sharing one stream of a NATS cluster on loopback.
type ClusterConfig struct {
	// Bin is the tidemark executable the nodes run (`serve`).
	Bin string
	// Nodes are the node counts to measure, e.g. 1, 2, 3; each gets a
	// fresh NATS cluster.
	Nodes []int
	// Partitions are the partition counts of the nodes' store to measure
	// (serve --partitions; none: 1), partition i's stream led by server
	// i mod Servers when Replicas is 2 or more.
	Partitions []int
	// Servers is the NATS cluster's size and Replicas the stream's.
	Servers, Replicas int
	// QoS are the levels to measure (0, 1, 2). On a cluster QoS 0 goes
	// through the stream too; its publishers count a message done when
	// its subscriber has it.
	QoS []int
	// Conns publishers at Window each, spread over the nodes.
	Conns, Window int
	// Duration is the measured sending time of each point, after a
	// warm-up of a fifth of it.
	Duration time.Duration
	// Sync is the nodes' --sync (empty: serve's default).
	Sync string
	// Dir holds the servers' and nodes' data.
	Dir string
	// Progress, when set, is told what runs next.
	Progress func(string)
}

// ClusterResult is one point of ClusterRun.
type ClusterResult struct {
	Nodes, Partitions, QoS int
	// PerSecond is the publishers' acknowledged messages per second, all
	// nodes together, over the measured time.
	PerSecond        float64
	P50Ms, P99Ms     float64
	Messages         int
	Lost, Duplicates int
	// NodeMicros is the nodes' CPU time per message (all nodes), and
	// LocalMicros this process's: the load generator and the NATS
	// servers, which run in it.
	NodeMicros, LocalMicros float64
	Err                     error
}

// ClusterRun measures aggregate QoS 0, 1 and 2 throughput through 1, 2,
// 3... Tidemark nodes on one NATS cluster. Publisher i connects to node
// i mod n and publishes on a topic that a subscriber on the next node
// (i+1 mod n) takes, so with more than one node every message crosses
// from one node to another through the stream. Every acknowledged message
// is checked: delivered, once, to its subscriber.
func ClusterRun(ctx context.Context, cfg ClusterConfig) []ClusterResult {
	var out []ClusterResult
	ks := cfg.Partitions
	if len(ks) == 0 {
		ks = []int{1}
	}
	for _, k := range ks {
		for _, n := range cfg.Nodes {
			for _, q := range cfg.QoS {
				if cfg.Progress != nil {
					cfg.Progress(fmt.Sprintf("%d node(s), %d partition(s), on %d NATS servers (R%d), QoS %d, %d publishers at window %d",
						n, k, cfg.Servers, cfg.Replicas, q, cfg.Conns, cfg.Window))
				}
				r := clusterPoint(ctx, cfg, n, k, q)
				out = append(out, r)
				if ctx.Err() != nil {
					return out
				}
			}
		}
	}
	return out
}

// runTB runs the NATS test cluster's helpers outside a test: Fatalf
// stops the point, cleanups run when it ends.
type runTB struct {
	dir      string
	cleanups []func()
	dirs     int
}

type tbFatal struct{ err error }

func (t *runTB) Helper() {}
func (t *runTB) Fatalf(format string, args ...any) {
	panic(tbFatal{fmt.Errorf(format, args...)})
}
func (t *runTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *runTB) TempDir() string {
	t.dirs++
	d := filepath.Join(t.dir, fmt.Sprintf("nats-%d", t.dirs))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatalf("%v", err)
	}
	return d
}
func (t *runTB) close() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

func clusterPoint(ctx context.Context, cfg ClusterConfig, nodes, parts, q int) (r ClusterResult) {
	r = ClusterResult{Nodes: nodes, Partitions: parts, QoS: q}
	r.Err = onCluster(cfg.Dir, fmt.Sprintf("cluster-%d-p%d-qos%d-", nodes, parts, q), cfg.Servers, func(tb *runTB, dir, urls string) error {
		var addrs []string
		var pids []int
		for k := range nodes {
			addr, err := freeport.Addr()
			if err != nil {
				return err
			}
			ndir := filepath.Join(dir, fmt.Sprintf("node%d", k+1))
			if err := os.MkdirAll(ndir, 0o755); err != nil {
				return err
			}
			args := []string{"serve", "--engine", "jetstream", "--nats-url", urls, "--replicas", strconv.Itoa(cfg.Replicas),
				"--node-id", fmt.Sprintf("node%d", k+1), "--data", filepath.Join(ndir, "data"), "--mqtt", addr,
				"--log-level", "warn", "--max-queued", "0", "--session-expiry", "0"}
			if cfg.Sync != "" {
				args = append(args, "--sync", cfg.Sync)
			}
			if parts > 1 {
				args = append(args, "--partitions", strconv.Itoa(parts))
				if cfg.Replicas > 1 {
					var leaders []string
					for i := range parts {
						leaders = append(leaders, fmt.Sprintf("n%d", i%cfg.Servers+1)) // the cluster's server names
					}
					args = append(args, "--partition-leaders", strings.Join(leaders, ","))
				}
			}
			logf, err := os.Create(filepath.Join(ndir, "serve.log"))
			if err != nil {
				return err
			}
			p, err := proc.Start(proc.Spec{Bin: cfg.Bin, Args: args, Dir: ndir, Log: logf})
			if err != nil {
				logf.Close()
				return err
			}
			tb.Cleanup(func() { _ = p.Stop(30 * time.Second); logf.Close() })
			if err := p.WaitListen(ctx, addr, 60*time.Second, nil); err != nil {
				return fmt.Errorf("node %d: %w: %s", k+1, err, p.LogTail(5))
			}
			addrs, pids = append(addrs, addr), append(pids, p.Pid())
		}
		return loadCluster(ctx, cfg, addrs, q, &r, pids)
	})
	return r
}

// onCluster starts a NATS cluster of servers, its data in a new directory
// under parent (named after pattern), runs fn on it, then stops the
// cluster, runs tb's cleanups and removes the directory. A Fatalf of the
// cluster's helpers becomes the error.
func onCluster(parent, pattern string, servers int, fn func(tb *runTB, dir, urls string) error) (err error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tb := &runTB{dir: dir}
	defer tb.close()
	defer func() {
		if p := recover(); p != nil {
			f, ok := p.(tbFatal)
			if !ok {
				panic(p)
			}
			err = f.err
		}
	}()
	urls, err := startNATSCluster(tb, servers)
	if err != nil {
		return err
	}
	return fn(tb, dir, urls)
}

// loadCluster runs the publishers and subscribers of one point.
func loadCluster(ctx context.Context, cfg ClusterConfig, addrs []string, q int, r *ClusterResult, pids []int) error {
	qos := packet.QoS(q)
	n := len(addrs)
	run := uint32(time.Now().UnixNano())
	prefix := fmt.Sprintf("mqttbench/%08x", run)
	subs := make([]*subscriber, n)
	for j := range n {
		s, err := subscribe(ctx, addrs[j], fmt.Sprintf("mqttbench-%08x-sub-%d", run, j), fmt.Sprintf("%s/%d/+", prefix, j), run, qos, cfg.Conns, false)
		if err != nil {
			return fmt.Errorf("subscriber on node %d: %w", j+1, err)
		}
		defer s.c.close()
		subs[j] = s
	}
	pubs := make([]*publisher, cfg.Conns)
	for i := range pubs {
		c, err := dial(ctx, addrs[i%n], fmt.Sprintf("mqttbench-%08x-pub-%d", run, i), false)
		if err != nil {
			return fmt.Errorf("publisher %d: %w", i, err)
		}
		defer c.close()
		pubs[i] = newPublisher(c, run, uint32(i), qos, cfg.Window, fmt.Sprintf("%s/%d/%d", prefix, (i+1)%n, i))
	}
	if qos == packet.QoS0 {
		for _, s := range subs {
			s.mu.Lock()
			s.notify = func(pub uint32, seq uint64, at time.Time) { pubs[pub].delivered(seq, at) }
			s.mu.Unlock()
		}
	}
	warmup := cfg.Duration / 5
	stop := make(chan struct{})
	start := time.Now().Add(warmup)
	for _, p := range pubs {
		p.from = start
	}
	timer := time.AfterFunc(warmup+cfg.Duration, func() { close(stop) })
	defer timer.Stop()
	nodeCPU := func() (d time.Duration) {
		for _, pid := range pids {
			d += proc.CPU(pid)
		}
		return d
	}
	cpu0, ncpu0 := proc.SelfCPU(), nodeCPU()
	errs := make([]error, len(pubs))
	var wg sync.WaitGroup
	for i, p := range pubs {
		wg.Go(func() {
			if err := p.publish(ctx, stop, 30*time.Second); err != nil {
				errs[i] = fmt.Errorf("publisher %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	cpu, ncpu := proc.SelfCPU()-cpu0, nodeCPU()-ncpu0
	var hist histogram
	var last time.Time
	measured := 0
	acked := make([][]bitset, n) // per subscriber: its publishers' acknowledged messages
	for j := range acked {
		acked[j] = make([]bitset, len(pubs))
	}
	for i, p := range pubs {
		p.mu.Lock()
		acked[(i+1)%n][i] = append(bitset(nil), p.acked...)
		r.Messages += p.done
		measured += p.measured
		hist.merge(&p.hist)
		if p.last.After(last) {
			last = p.last
		}
		p.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for j, s := range subs {
		s.wait(ctx, acked[j], 10*time.Second)
		r.Lost += s.missing(acked[j])
		s.mu.Lock()
		r.Duplicates += s.dups
		serr := s.readErr
		s.mu.Unlock()
		if serr != nil {
			return fmt.Errorf("subscriber on node %d: %w", j+1, serr)
		}
	}
	if last.After(start) {
		r.PerSecond = float64(measured) / last.Sub(start).Seconds()
	}
	r.P50Ms, r.P99Ms = ms(hist.quantile(0.50)), ms(hist.quantile(0.99))
	if r.Messages > 0 {
		r.NodeMicros = float64(ncpu.Microseconds()) / float64(r.Messages)
		r.LocalMicros = float64(cpu.Microseconds()) / float64(r.Messages)
	}
	return ctx.Err()
}

// WriteClusterTable writes rs as a table, with each rate's ratio to the
// one node rate of its QoS.
func WriteClusterTable(w io.Writer, rs []ClusterResult) error {
	// The baseline of each QoS: one node on the fewest partitions.
	type base struct {
		parts int
		rate  float64
	}
	one := map[int]base{}
	for _, r := range rs {
		if b, ok := one[r.QoS]; r.Nodes == 1 && r.Err == nil && (!ok || r.Partitions < b.parts) {
			one[r.QoS] = base{r.Partitions, r.PerSecond}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tpartitions\tQoS\tmsgs/s\tx 1 node\tp50 ms\tp99 ms\tmessages\tlost\tdup\tnodes µs/msg\tload+NATS µs/msg\t")
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(tw, "%d\t%d\t%d\terror: %s\t\t\t\t\t\t\t\t\t\n", r.Nodes, r.Partitions, r.QoS, strings.ReplaceAll(r.Err.Error(), "\t", " "))
			continue
		}
		x := "-"
		if b := one[r.QoS]; b.rate > 0 {
			x = fmt.Sprintf("%.2f", r.PerSecond/b.rate)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%s\t%.2f\t%.2f\t%d\t%d\t%d\t%.1f\t%.1f\t\n", r.Nodes, r.Partitions, r.QoS, r.PerSecond, x,
			r.P50Ms, r.P99Ms, r.Messages, r.Lost, r.Duplicates, r.NodeMicros, r.LocalMicros)
	}
	return tw.Flush()
}
