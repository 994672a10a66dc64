package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
)

func clusterBenchCmd() *cobra.Command {
	var nodes, qos, partitions []string
	var servers, replicas, conns, window int
	var dur time.Duration
	var syncMode, dir string
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Measure aggregate QoS 0, 1 and 2 throughput through 1, 2, 3 Tidemark nodes on one NATS cluster",
		Long: `Starts a NATS JetStream cluster on 127.0.0.1 inside this process (--servers servers, the
stream at --replicas replicas) and, for each node count, that many 'tidemark serve --engine
jetstream' processes on it, each with its own node id. Publisher i connects to node i mod n and
publishes on a topic a subscriber on node i+1 mod n takes, so with two nodes or more every message
crosses between nodes through the stream. Prints the publishers' acknowledged messages per second
(QoS 0: delivered ones, a publisher keeping --window undelivered at most), all nodes together, the ratio to one node, acknowledgement latency, lost and duplicated messages,
and CPU per message of the nodes and of this process (the load and the NATS servers). Every point
starts on a fresh cluster and stops it after.`,
		Example: `  tidemark bench cluster
  tidemark bench cluster --nodes 1,2,3 --qos 1,2 --conns 24 --window 16 --duration 5s
  tidemark bench cluster --nodes 1,2 --qos 0,1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := engine.Lookup("jetstream"); err != nil {
				return fmt.Errorf("the cluster benchmark runs the jetstream engine: %w", err)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the tidemark binary: %w", err)
			}
			ns, err := positiveInts("--nodes", "1,2,3", nodes)
			if err != nil {
				return err
			}
			ks, err := positiveInts("--partitions", "1,3", partitions)
			if err != nil {
				return err
			}
			for _, k := range ks {
				if k > 16 {
					return fmt.Errorf("--partitions %d: at most 16", k)
				}
			}
			var qs []int
			for _, v := range qos {
				q, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || q < 0 || q > 2 {
					return fmt.Errorf("--qos %q: want 0, 1 or 2, e.g. 0,1,2", v)
				}
				qs = append(qs, q)
			}
			if servers < 1 || replicas < 1 || replicas > servers {
				return fmt.Errorf("--servers %d --replicas %d: want 1 or more servers and at most as many replicas", servers, replicas)
			}
			if conns < 1 || window < 1 || window > 65535 {
				return fmt.Errorf("--conns %d --window %d: want 1 or more connections and a window of 1 to 65535", conns, window)
			}
			if syncMode != "" {
				if _, err := engine.ParseSyncMode(syncMode); err != nil {
					return fmt.Errorf("--sync: %w", err)
				}
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "tidemark-cluster-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			rs := mqttbench.ClusterRun(cmd.Context(), mqttbench.ClusterConfig{Bin: self, Nodes: ns, Partitions: ks, Servers: servers,
				Replicas: replicas, QoS: qs, Conns: conns, Window: window, Duration: dur, Sync: syncMode, Dir: dir,
				Progress: func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }})
			if err := mqttbench.WriteClusterTable(cmd.OutOrStdout(), rs); err != nil {
				return err
			}
			var errs []error
			for _, r := range rs {
				switch {
				case r.Err != nil:
					errs = append(errs, fmt.Errorf("%d node(s), %d partition(s), QoS %d: %w", r.Nodes, r.Partitions, r.QoS, r.Err))
				case r.Lost > 0 || (r.QoS == 2 && r.Duplicates > 0):
					errs = append(errs, fmt.Errorf("%d node(s), %d partition(s), QoS %d: %d lost, %d duplicated", r.Nodes, r.Partitions, r.QoS, r.Lost, r.Duplicates))
				}
			}
			return errors.Join(errs...)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&nodes, "nodes", []string{"1", "2", "3"}, "Tidemark node counts to measure")
	fs.StringSliceVar(&partitions, "partitions", []string{"1"}, "partition counts of the nodes' store to measure (serve --partitions), each partition's stream led by another server, e.g. 1,3")
	fs.StringSliceVar(&qos, "qos", []string{"1", "2"}, "QoS levels to measure")
	fs.IntVar(&servers, "servers", 3, "NATS servers in the cluster")
	fs.IntVar(&replicas, "replicas", 3, "stream replicas")
	fs.IntVar(&conns, "conns", 12, "publishing connections, spread over the nodes")
	fs.IntVar(&window, "window", 16, "PUBLISHes each publisher keeps unacknowledged")
	fs.DurationVar(&dur, "duration", 3*time.Second, "measured sending time per point (after a warm-up of a fifth of it)")
	fs.StringVar(&syncMode, "sync", "", "the nodes' --sync (default: serve's)")
	fs.StringVar(&dir, "dir", "", "directory for the servers' and nodes' data (default: a temporary one)")
	return cmd
}

func partitionsBenchCmd() *cobra.Command {
	var parts []string
	var servers, replicas, committers, window, payload int
	var dur time.Duration
	var dir string
	cmd := &cobra.Command{
		Use:   "partitions",
		Short: "Measure table commits over 1, 2, 3 partitions, one JetStream stream each, on one NATS cluster",
		Long: `Starts a NATS JetStream cluster on 127.0.0.1 inside this process (--servers servers, each
stream at --replicas replicas) and, for each partition count K, opens K JetStream engines, one
stream each with its leader on another server, as the partitions of one set of tables. Committers
commit one-record transactions to the partition of a random key, each keeping --window in flight.
Prints completed commits per second, all partitions together, the ratio to one partition, the
commit latency and this process's CPU time per commit (committers, engines and servers). Every point starts on a fresh cluster and stops it after. On a machine whose cores
the servers share, the ratio shows what one more leader costs more than what it adds.`,
		Example: `  tidemark bench partitions
  tidemark bench partitions --partitions 1,3 --committers 48 --window 16 --duration 5s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := engine.Lookup("jetstream"); err != nil {
				return fmt.Errorf("the partitions benchmark runs the jetstream engine: %w", err)
			}
			ks, err := positiveInts("--partitions", "1,2,3", parts)
			if err != nil {
				return err
			}
			if servers < 1 || replicas < 1 || replicas > servers {
				return fmt.Errorf("--servers %d --replicas %d: want 1 or more servers and at most as many replicas", servers, replicas)
			}
			if committers < 1 || window < 1 || payload < 0 || payload > 1<<20 {
				return fmt.Errorf("--committers %d --window %d --payload %d: want 1 or more committers, a window of 1 or more and a payload of 0 to 1 MiB",
					committers, window, payload)
			}
			if dur <= 0 {
				return fmt.Errorf("--duration %v: must be positive", dur)
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "tidemark-partitions-"); err != nil {
					return err
				}
				defer os.RemoveAll(dir)
			}
			rs := mqttbench.PartitionsRun(cmd.Context(), mqttbench.PartitionsConfig{Partitions: ks, Servers: servers, Replicas: replicas,
				Committers: committers, Window: window, Payload: payload, Duration: dur, Dir: dir,
				Progress: func(s string) { fmt.Fprintln(cmd.ErrOrStderr(), s) }})
			if err := mqttbench.WritePartitionsTable(cmd.OutOrStdout(), rs); err != nil {
				return err
			}
			var errs []error
			for _, r := range rs {
				if r.Err != nil {
					errs = append(errs, fmt.Errorf("%d partition(s): %w", r.Partitions, r.Err))
				}
			}
			return errors.Join(errs...)
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&parts, "partitions", []string{"1", "2", "3"}, "partition counts to measure")
	fs.IntVar(&servers, "servers", 3, "NATS servers in the cluster")
	fs.IntVar(&replicas, "replicas", 3, "replicas of each partition's stream")
	fs.IntVar(&committers, "committers", 24, "committing goroutines")
	fs.IntVar(&window, "window", 8, "transactions each committer keeps in flight")
	fs.IntVar(&payload, "payload", 256, "bytes of each committed record")
	fs.DurationVar(&dur, "duration", 3*time.Second, "measured time per point (after a warm-up of a fifth of it)")
	fs.StringVar(&dir, "dir", "", "directory for the servers' and engines' data (default: a temporary one)")
	return cmd
}

// positiveInts parses a flag's comma-separated whole numbers; example
// shows a good value in the error.
func positiveInts(flag, example string, vs []string) ([]int, error) {
	var out []int
	for _, s := range vs {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q: want positive whole numbers, e.g. %s", flag, s, example)
		}
		out = append(out, n)
	}
	return out, nil
}
