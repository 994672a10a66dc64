package main_test

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBenchFleetOffline runs `tidemark bench fleet --offline` with small
// counts and checks its table: a row per count, each reconnect found its
// session and the message queued for it (the command fails otherwise),
// and a bad count is refused naming the flag.
func TestBenchFleetOffline(t *testing.T) {
	bin := tidemarkBinary(t)
	out, err := exec.Command(bin, "bench", "fleet", "--offline", "5,300", "--reconnects", "3", "--sync", "none").CombinedOutput()
	if err != nil {
		t.Fatalf("bench fleet --offline: %v\n%s", err, out)
	}
	for _, n := range []string{"5", "300"} {
		row := regexp.MustCompile(`(?m)^\| tidemark/pebble none \| ` + n + ` \| .* \| \d+ \|$`)
		if !row.Match(out) {
			t.Fatalf("no row for %s offline sessions:\n%s", n, out)
		}
	}
	out, err = exec.Command(bin, "bench", "fleet", "--offline", "many").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--offline \"many\"") {
		t.Fatalf("a bad --offline was not refused by name: %v\n%s", err, out)
	}
}
