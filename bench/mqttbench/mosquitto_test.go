package mqttbench

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mosquittoPeer is the mosquitto target. mosquitto is an optional peer:
// where it is not installed the test is skipped, naming the package,
// unless TIDEMARK_REQUIRE_PEERS=1 (set by CI, which installs it) makes
// its absence a failure.
func mosquittoPeer(t testing.TB) Target {
	t.Helper()
	p, err := Peer("mosquitto", 0, 0)
	if errors.Is(err, ErrNotInstalled) && os.Getenv("TIDEMARK_REQUIRE_PEERS") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMosquittoDeepLoads drives mosquitto at the loads its default limits
// would drop messages at (window 256 on one connection, 50 connections)
// and checks every acknowledged message arrived exactly once, in order.
func TestMosquittoDeepLoads(t *testing.T) {
	loads := []Load{{QoS: 1, Window: 256, Conns: 1}, {QoS: 2, Window: 256, Conns: 1}, {QoS: 1, Window: 16, Conns: ManyConns}}
	rep, err := Run(t.Context(), Config{Targets: []Target{mosquittoPeer(t)}, Loads: loads, Duration: 200 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if !r.Clean() || r.Delivered != r.Messages || r.Messages < r.Load.Window {
			t.Errorf("%s %s: %+v", r.Target, r.Load, r)
		}
		if r.VsMosquitto != 1 {
			t.Errorf("%s %s: x mosquitto = %v", r.Target, r.Load, r.VsMosquitto)
		}
	}
}

// TestMosquittoStop checks that a started broker accepts connections on
// 127.0.0.1, and that stop ends it cleanly and closes its port.
func TestMosquittoStop(t *testing.T) {
	inst, err := mosquittoPeer(t).start(t.Context(), t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(inst.addr); host != "127.0.0.1" {
		t.Errorf("listening on %s", inst.addr)
	}
	c, err := net.Dial("tcp", inst.addr)
	if err != nil {
		t.Fatalf("dial before stop: %v", err)
	}
	c.Close()
	if err := inst.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if c, err := net.Dial("tcp", inst.addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after stop", inst.addr)
	}
}

func TestMosquittoNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findMosquitto(filepath.Join(t.TempDir(), "mosquitto"))
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install mosquitto") {
		t.Fatalf("got %v", err)
	}
	if _, err := Peer("hivemq", 0, 0); err == nil || !strings.Contains(err.Error(), "mosquitto") {
		t.Fatalf("unknown peer: %v", err)
	}
}

// TestRatioColumnsFollowPeers checks the table has a ratio column for each
// peer that ran and none for the others.
func TestRatioColumnsFollowPeers(t *testing.T) {
	l := Load{QoS: 1, Window: 1, Conns: 1}
	rep := &Report{Results: []Result{
		{Target: "tidemark/pebble always", Kind: KindTidemark, Sync: "always", Load: l, PerSecond: 300},
		{Target: "mosquitto", Kind: KindMosquitto, Load: l, PerSecond: 100},
	}}
	rep.compare()
	if got := rep.Results[0].VsMosquitto; got != 3 {
		t.Errorf("x mosquitto = %v, want 3", got)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	header, _, _ := strings.Cut(out.String(), "\n")
	if !strings.Contains(header, "x mosquitto") || strings.Contains(header, "x nats") || strings.Contains(header, "x mochi") {
		t.Errorf("header %q", header)
	}
	if !strings.Contains(out.String(), "3.00") {
		t.Errorf("no ratio in\n%s", out.String())
	}
}
