package freeport

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestPortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
		if p < low || p >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", p, low, ephemeralLow())
		}
	}
	// A port in use is skipped.
	p, _ := Port()
	if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
		defer ln.Close()
	}
	q, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if q == p+1 {
		t.Fatalf("port %d in use was given", q)
	}
}

// A port another process claimed is not given, though nothing listens on
// it.
func TestPortsClaimedElsewhereAreSkipped(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") != "" {
		p, err := Port()
		if err != nil {
			os.Exit(2)
		}
		fmt.Println(p)
		// Hold the claim until the parent is done.
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortsClaimedElsewhereAreSkipped$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child printed %q", line)
	}
	if claim(theirs) {
		t.Fatalf("port %d, claimed by another process, claimed again", theirs)
	}
	if _, err := Port(); err != nil { // sets the range up
		t.Fatal(err)
	}
	mu.Lock()
	next = theirs // the next Port starts its search at their port
	mu.Unlock()
	if p, err := Port(); err != nil || p == theirs {
		t.Fatalf("Port() = %d, %v: another process's port given", p, err)
	}
}
