package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/table"
)

// TestServePartitions runs `tidemark serve --partitions 3`: publishers
// whose client ids fall in each partition reach a persistent subscriber
// across a restart, `tidemark inspect --partitions 3` shows a log per
// partition, and a data directory opened with another partition count
// is refused with the fix named.
func TestServePartitions(t *testing.T) {
	dir := t.TempDir()
	bin := tidemarkBinary(t)
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "tidemark.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("data: %s\nmqtt: %s\nmetrics: %s\npartitions: 3\n", data, addr, metricsAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, bin, cfg, addr)
	got := make(chan string, 100)
	sub := connectWith(t, addr, "sub", false, func(_ paho3.Client, m paho3.Message) { got <- m.Topic() + "=" + string(m.Payload()) })
	if tok := sub.Subscribe("p/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	var pubs []string
	for p := 0; len(pubs) < 3; p++ {
		id := fmt.Sprintf("pub%d", p)
		if table.PartitionOf(id, 3) == len(pubs) {
			pubs = append(pubs, id)
		}
	}
	for _, id := range pubs {
		c := connect(t, addr, id, true)
		publish(t, c, "p/"+id, false, "before")
		c.Disconnect(100)
	}
	// The log gauge counts every partition's log: one message each.
	body := scrapeMetrics(t, metricsAddr)
	m := regexp.MustCompile(`(?m)^tidemark_log_entries\{engine="pebble"\} (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no tidemark_log_entries:\n%s", body)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < len(pubs) {
		t.Fatalf("tidemark_log_entries %q, want the %d messages of the three partitions:\n%s", m, len(pubs), body)
	}
	srv.stop(t)
	if !strings.Contains(srv.Log(), "partitions=3") {
		t.Fatalf("no partition count in the log:\n%s", srv.Log())
	}

	out, err := exec.Command(bin, "inspect", "--data", data, "--partitions", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for i := range 3 {
		if !strings.Contains(string(out), fmt.Sprintf("partition %d log: ", i)) {
			t.Fatalf("inspect shows no log of partition %d:\n%s", i, out)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"--partitions 1", "holds a store split over 3 partitions (p0, p1, p2): run with --partitions 3"},
		{"--partitions 17", "--partitions 17: allowed 1 to 16"},
		{"--partition-leaders n1", "--partition-leaders applies only to --engine jetstream"},
	} {
		args := append([]string{"serve", "--config", cfg}, strings.Fields(c.args)...)
		if out, err := exec.Command(bin, args...).CombinedOutput(); err == nil || !strings.Contains(string(out), c.want) {
			t.Fatalf("serve %s: %v, want %q in:\n%s", c.args, err, c.want, out)
		}
	}
	single := filepath.Join(dir, "single")
	if err := os.MkdirAll(single, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(single, "MANIFEST"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "serve", "--data", single, "--mqtt", freeAddr(t), "--partitions", "2").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "holds a store of one partition") {
		t.Fatalf("serve --partitions 2 on a store of one: %v\n%s", err, out)
	}

	startServe(t, bin, cfg, addr)
	sub = connectWith(t, addr, "sub", false, func(_ paho3.Client, m paho3.Message) { got <- m.Topic() + "=" + string(m.Payload()) })
	defer sub.Disconnect(100)
	seen := map[string]bool{}
	for range pubs {
		select {
		case m := <-got:
			seen[m] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("after the restart the subscriber got %v", seen)
		}
	}
	for _, id := range pubs {
		if !seen["p/"+id+"=before"] {
			t.Fatalf("no message of %s (partition %d): %v", id, table.PartitionOf(id, 3), seen)
		}
	}
}
