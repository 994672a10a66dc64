package main_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestingCode keeps the test framework and the property
// library out of the product binary: the conformance suite it runs has its
// own T, and the go test adapters live in packages of their own.
func TestBinaryLinksNoTestingCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, banned := range []string{"testing", "pgregory.net/rapid", "github.com/anishathalye/porcupine"} {
		if slices.Contains(deps, banned) {
			t.Errorf("the tidemark binary links %s", banned)
		}
	}
}

// TestPebbleOnlyBuildLinksNoOtherEngine checks that the engine tags leave
// the other engines' libraries out, bench peers included.
func TestPebbleOnlyBuildLinksNoOtherEngine(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "nobadger,nojetstream,nolmdb", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/dgraph-io/badger", "github.com/nats-io/nats-server", "github.com/PowerDNS/lmdb-go", "github.com/mochi-mqtt"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("a Pebble-only build links %s", dep)
			}
		}
	}
}
