package main_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBenchFleetSmall runs `tidemark bench fleet` with a small fleet on
// Pebble (a `tidemark serve` child of the built binary) and mochi (a
// `tidemark bench peer` child) and checks the table it prints: a row for
// each broker, nothing lost at Tidemark, and the benchmark exits 0. A bad flag is refused naming the fix.
func TestBenchFleetSmall(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "fleet", "--sessions", "150", "--peers", "mochi", "--sync", "none", "--fanout", "3", "--spread-messages", "300").CombinedOutput()
	if err != nil {
		t.Fatalf("bench fleet: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^\| tidemark/pebble none \| 150 \| .* \| 0 \| 0 \| \d+ \|$`)
	if !row.Match(out) {
		t.Fatalf("no row for 150 sessions with nothing lost and no retry:\n%s", out)
	}
	// The embedded peer ran as a process of its own: its row has its
	// resident memory.
	if !regexp.MustCompile(`(?m)^\| mochi \| 150 \| \d+ \| [1-9]\d*\.\d \| `).Match(out) {
		t.Fatalf("no row for mochi with its resident memory:\n%s", out)
	}
	out, err = exec.Command(bin, "bench", "peer", "--peer", "emqx").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown peer \"emqx\": use one of nats, mochi") {
		t.Fatalf("bench peer ran an unknown peer or did not name the known ones: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "fleet", "--peers", "emqx").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "knows mosquitto, nats and mochi") {
		t.Fatalf("an unknown peer was not refused naming the known ones: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "fleet", "--sessions", "ten").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--sessions \"ten\"") {
		t.Fatalf("a bad --sessions was not refused by name: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "fleet", "--rounds", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--rounds 0: allowed 1 to 99") {
		t.Fatalf("a bad --rounds was not refused naming the range: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "bench", "fleet", "--spread-messages", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--spread-messages 0: give 1 or more") {
		t.Fatalf("a bad --spread-messages was not refused by name: %v\n%s", err, out)
	}
}
