package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBenchLoadsFlag runs only the points --loads names, and names the
// accepted form when a point is misspelled.
func TestBenchLoadsFlag(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "--engines", "pebble", "--peers", "none", "--sync", "none",
		"--loads", "qos1-w16,qos0-w1", "--duration", "200ms").CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark bench --loads: %v\n%s", err, out)
	}
	var rows []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "QoS" {
			rows = append(rows, strings.Join(f[:3], " "))
		}
	}
	if strings.Join(rows, ",") != "QoS 1 w16,QoS 0 w1" {
		t.Fatalf("points run: %q, want QoS 1 w16 then QoS 0 w1\n%s", rows, out)
	}
	out, err = exec.Command(bin, "bench", "--engines", "pebble", "--peers", "none", "--loads", "qos2-window1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "qos<0-2>-w<window>[-x<connections>]") {
		t.Fatalf("tidemark bench --loads qos2-window1: err %v, want the accepted form named\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "--engines", "pebble", "--peers", "none", "--rounds", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--rounds 0: allowed 1 to 99") {
		t.Fatalf("tidemark bench --rounds 0: err %v, want the allowed range named\n%s", err, out)
	}
}
