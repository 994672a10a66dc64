package main_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBenchClusterSmall runs `tidemark bench cluster` with two nodes on a
// three-server NATS cluster at QoS 0 and 2, where every message crosses
// from one node to the other through the streams, the nodes' store split
// over three partitions, each stream led by another server, and checks
// the table: a row for two nodes at each QoS with messages, none lost or
// duplicated, and exit 0. A bad flag is refused naming the fix.
func TestBenchClusterSmall(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "cluster", "--nodes", "2", "--partitions", "3", "--qos", "0,2", "--conns", "4", "--window", "8",
		"--duration", "500ms").CombinedOutput()
	if err != nil {
		t.Fatalf("bench cluster: %v\n%s", err, out)
	}
	for _, q := range []string{"0", "2"} {
		row := regexp.MustCompile(`(?m)^\s+2\s+3\s+` + q + `\s+\d+\s+-\s+[\d.]+\s+[\d.]+\s+([1-9]\d*)\s+0\s+0\s`)
		if !row.Match(out) {
			t.Fatalf("no row for 2 nodes on 3 partitions at QoS %s with messages, none lost or duplicated:\n%s", q, out)
		}
	}
	out, err = exec.Command(bin, "bench", "cluster", "--qos", "3").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--qos "3": want 0, 1 or 2`) {
		t.Fatalf("--qos 3 was not refused by name: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "cluster", "--replicas", "5").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--replicas 5") {
		t.Fatalf("more replicas than servers was not refused by name: %v\n%s", err, out)
	}
}

// TestBenchPartitionsSmall runs `tidemark bench partitions` with one and
// two partitions on a three-server NATS cluster and checks the table: a
// row per count with its streams' leaders on different servers, commits,
// and exit 0. A bad flag is refused naming the fix.
func TestBenchPartitionsSmall(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "partitions", "--partitions", "1,2", "--committers", "4", "--window", "4",
		"--duration", "500ms").CombinedOutput()
	if err != nil {
		t.Fatalf("bench partitions: %v\n%s", err, out)
	}
	for _, row := range []string{`(?m)^\s+1\s+n1\s+\d+\s+1\.00\s+[\d.]+\s+[\d.]+\s+[1-9]\d*\s+[\d.]+\s*$`, `(?m)^\s+2\s+n1,n2\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[1-9]\d*\s+[\d.]+\s*$`} {
		if !regexp.MustCompile(row).Match(out) {
			t.Fatalf("no row matching %s:\n%s", row, out)
		}
	}
	out, err = exec.Command(bin, "bench", "partitions", "--partitions", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `--partitions "0": want positive whole numbers`) {
		t.Fatalf("--partitions 0 was not refused by name: %v\n%s", err, out)
	}
}
