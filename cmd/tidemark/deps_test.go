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

// TestLayering keeps imports pointing down the layers (cmd -> mqtt ->
// table -> engine <- engine/*) and each storage library inside its own
// engine package, so a backend can be left out by its build tag and no
// caller comes to depend on one backend's API.
func TestLayering(t *testing.T) {
	const mod = "github.com/tidemark-io/tidemark/"
	out, err := exec.Command("go", "list", "-tags", "faults", "-f",
		"{{.ImportPath}} {{join .Imports \" \"}} | {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	homes := map[string]string{
		"github.com/cockroachdb/pebble":  "engine/pebble",
		"github.com/dgraph-io/badger":    "engine/badger",
		"github.com/PowerDNS/lmdb-go":    "engine/lmdb",
		"github.com/nats-io/nats.go":     "engine/jetstream",
		"github.com/nats-io/nats-server": "engine/jetstream",
	}
	// The benchmark runs nats-server's own MQTT broker as a peer to
	// measure against; it stores nothing of Tidemark's.
	peers := map[string]string{"bench/mqttbench": "github.com/nats-io/nats-server"}
	// below[p] lists the module's packages p must never import outside
	// its tests (an engine's tests run the conformance suite on it).
	below := map[string][]string{
		"engine": {"table", "mqtt", "conformance", "cmd"},
		"table":  {"mqtt", "conformance", "cmd"},
		"mqtt":   {"conformance", "cmd"},
	}
	within := func(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }
	// Inside the broker, the codec, the subscription index, the access
	// interfaces (mqtt/auth) and the internal packages sit below package
	// mqtt, its public face: they never import it or the packages built on
	// it. Below the broker's core (mqtt/internal/broker), its parts (one
	// job each: a session's sending side, its stored state, routing,
	// admission, ...) never import the core, so each can be read and
	// tested without the broker.
	brokerBelow := []string{"mqtt/internal", "mqtt/packet", "mqtt/topic", "mqtt/auth"}
	brokerAbove := func(rel string) bool {
		return rel == "mqtt" || within(rel, "mqtt/mqtttest")
	}
	const core = "mqtt/internal/broker"
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], mod)
		checked++
		inTests := false
		for _, imp := range f[1:] {
			if imp == "|" {
				inTests = true
				continue
			}
			for lib, home := range homes {
				if strings.HasPrefix(imp, lib) && !within(pkg, home) && peers[pkg] != lib {
					t.Errorf("%s imports %s, which only %s may", pkg, imp, home)
				}
			}
			rel, ours := strings.CutPrefix(imp, mod)
			if inTests || !ours {
				continue
			}
			for _, low := range brokerBelow {
				if within(pkg, low) && brokerAbove(rel) {
					t.Errorf("%s imports %s, the broker layer above it", pkg, imp)
				}
			}
			if within(pkg, "mqtt/internal") && !within(pkg, core) && within(rel, core) {
				t.Errorf("%s imports %s, the broker's core above it", pkg, imp)
			}
			for layer, banned := range below {
				for _, up := range banned {
					if within(pkg, layer) && within(rel, up) {
						t.Errorf("%s imports %s, a layer above it", pkg, imp)
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list named %d packages; the check read nothing", checked)
	}
}
