package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/engine/jetstream/jetstreamtest"
)

// TestServeClusterFailover runs two Tidemark nodes on one R3 stream of a
// three-server NATS cluster under QoS 1 and QoS 2 load, with persistent
// subscribers online and offline, and fails one thing at a time: the
// Tidemark node the clients use is killed with SIGKILL and the clients
// move to the other node (the same address, as behind a load balancer),
// four times; in between, the stream's leader server is stopped, brought
// back, and then a server that does not lead is stopped. Every
// acknowledged message must reach every subscriber, QoS 2 exactly once.
func TestServeClusterFailover(t *testing.T) { clusterFailover(t, 1) }

// TestServeClusterFailoverPartitioned is TestServeClusterFailover with
// the nodes' store split over three streams, each led by another server
// (serve --partitions 3 --partition-leaders n1,n2,n3): a publisher's
// messages and a subscriber's state are in different streams, and the
// server stopped leads one of them.
func TestServeClusterFailoverPartitioned(t *testing.T) { clusterFailover(t, 3) }

func clusterFailover(t *testing.T, partitions int) {
	bin := tidemarkBinary(t)
	cluster := jetstreamtest.StartCluster(t, 3)
	jetstreamtest.WaitMetaLeader(t, cluster.Servers)
	base := t.TempDir()
	logs := &brokerLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs:\n%s", logs.tail())
		}
	})
	starts, stopped := 0, -1
	start := func(t conformance.T, _, addr string) func() {
		t.Helper()
		began := time.Now()
		var step string
		switch starts {
		case 0:
		case 2:
			if stopped = cluster.StreamLeader("tidemark"); stopped < 0 {
				t.Fatalf("no server leads the stream")
			}
			cluster.Stop(stopped)
			step = fmt.Sprintf("; stream leader n%d stopped", stopped+1)
		case 3:
			cluster.Restart(stopped)
			leader := cluster.StreamLeader("tidemark")
			for i := range cluster.Servers {
				if i != leader && i != stopped {
					cluster.Stop(i)
					step = fmt.Sprintf("; n%d back, then n%d stopped (leader n%d)", stopped+1, i+1, leader+1)
					stopped = i
					break
				}
			}
		default:
			if stopped >= 0 {
				cluster.Restart(stopped)
				step = fmt.Sprintf("; n%d back", stopped+1)
				stopped = -1
			}
		}
		node := []string{"a", "b"}[starts%2]
		starts++
		dir := filepath.Join(base, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("%v", err)
		}
		cfg := []string{"nats-url: " + cluster.URLs(), "replicas: 3", "node-id: " + node, "log-level: info"}
		if partitions > 1 {
			cfg = append(cfg, fmt.Sprintf("partitions: %d", partitions), "partition-leaders: n1,n2,n3")
		}
		kill := startKillable(t, bin, "jetstream", dir, addr, logs, cfg...)
		if starts > 1 {
			t.Logf("failover %d: node %s serving %v after the previous node was killed%s", starts-1, node, time.Since(began).Round(time.Millisecond), step)
		}
		return kill
	}
	rep := conformance.Torture(t, conformance.TortureOptions{
		Start:      start,
		Addr:       freeAddr(t),
		Kills:      4,
		Messages:   6000,
		Publishers: 4,
		Window:     32,
		MaxUptime:  time.Second,
	})
	t.Logf("failover: %v", rep)
	all := logs.all()
	t.Logf("index consumers recreated: %d found on a server behind the stream, %d standing still",
		strings.Count(all, "the index consumer is on a server behind the stream"), strings.Count(all, "the index consumer stands still"))
}
