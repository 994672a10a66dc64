package main_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBenchFleetSmall runs `tidemark bench fleet` with a small fleet on
// Pebble (a `tidemark serve` child of the built binary) and checks the
// table it prints: a row for the broker, nothing lost, and the benchmark
// exits 0. A bad flag is refused naming the fix.
func TestBenchFleetSmall(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "fleet", "--sessions", "150", "--peers", "none", "--sync", "none", "--fanout", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("bench fleet: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^\| tidemark/pebble none \| 150 \| .* \| 0 \| 0 \| \d+ \|$`)
	if !row.Match(out) {
		t.Fatalf("no row for 150 sessions with nothing lost and no retry:\n%s", out)
	}
	out, err = exec.Command(bin, "bench", "fleet", "--sessions", "ten").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--sessions \"ten\"") {
		t.Fatalf("a bad --sessions was not refused by name: %v\n%s", err, out)
	}
}
