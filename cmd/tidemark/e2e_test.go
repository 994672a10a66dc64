package main_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/internal/proc"
)

// TestServeEndToEnd builds the binary, runs `tidemark serve` from a config
// file, publishes and subscribes with a real client, scrapes /metrics,
// stops it with SIGTERM, restarts it and finds the retained and queued
// messages.
func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	bin := tidemarkBinary(t)
	mqttAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "tidemark.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("data: %s\nmqtt: %s\nmetrics: %s\nlog-level: debug\nlock-profile-rate: 1\n",
		filepath.Join(dir, "data"), mqttAddr, metricsAddr)), 0o644); err != nil {
		t.Fatal(err)
	}

	// The effective configuration names each setting's source.
	out, err := exec.Command(bin, "serve", "--config", cfg, "--print-config").Output()
	if err != nil || !strings.Contains(string(out), "mqtt: \""+mqttAddr+"\"  # file") {
		t.Fatalf("--print-config: %v\n%s", err, out)
	}
	// A session that never returns stops holding the log by default.
	for _, want := range []string{"session-expiry: 168h0m0s  # default", "max-queued: 100000  # default"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("--print-config lacks %q:\n%s", want, out)
		}
	}
	// A bad value is refused before anything is opened, naming the setting.
	for _, args := range [][]string{{"--sync", "sometimes", "--sync:"}, {"--sync-defer", "-1ms", "--sync-defer -1ms: must be"},
		{"--max-topic-length", "70000", "--max-topic-length 70000: allowed 1 to 65535"}, {"--connect-timeout", "0s", "--connect-timeout 0s: must be positive"},
		{"--max-memory-mb", "10", "--max-memory-mb 10: must be 0 (no budget) or at least 64"}, {"--max-inflight", "0", "--max-inflight 0: allowed 1 to 65535"},
		{"--max-publish-rate", "-5", "--max-publish-rate -5: must be 0"}, {"--max-retained", "-1", "--max-retained -1: must be 0"},
		{"--max-inflight-bytes", "-1", "--max-inflight-bytes -1: must be 0 (no limit) or positive"},
		{"--max-packet-size", "8388608", "--max-packet-size 8388608: allowed 64 to 3932160 bytes"},
		{"--max-queued-bytes", "-1", "--max-queued-bytes -1: must be 0 (no limit) or positive"},
		{"--session-expiry", "500ms", "--session-expiry 500ms: must be 0 (never) or at least 1s"},
		{"--lock-profile-rate", "-1", "--lock-profile-rate -1: must be 0 (off) or positive"},
		{"--mqtt", "127.0.0.1:99999", `--mqtt "127.0.0.1:99999": port "99999"`}, {"--metrics", "127.0.0.1:x9", `--metrics "127.0.0.1:x9": port "x9"`},
		{"--gc-percent", "5", "--gc-percent 5: must be at least 10"}, {"--gc-percent", "-1", "--gc-percent -1 turns the collector off until the memory budget"}} {
		bad := exec.Command(bin, "serve", "--config", cfg, args[0], args[1])
		if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), args[2]) {
			t.Fatalf("bad %s accepted: %v\n%s", args[0], err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Fatalf("a refused setting left a data directory behind: %v", err)
	}

	srv := startServe(t, bin, cfg, mqttAddr)
	sub := connect(t, mqttAddr, "e2e-sub", false)
	if tok := sub.Subscribe("e2e/queued", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	pub := connect(t, mqttAddr, "e2e-pub", true)
	publish(t, pub, "e2e/retained", true, "kept")
	for i := 0; i < 5; i++ {
		publish(t, pub, "e2e/queued", false, fmt.Sprint("q", i))
	}
	pub.Disconnect(100)

	body := scrapeMetrics(t, metricsAddr)
	// serve's collector target, unless the environment sets its own.
	gogc := "go_gc_gogc_percent 200"
	if v := os.Getenv("GOGC"); v != "" {
		gogc = "go_gc_gogc_percent " + v
	}
	for _, want := range []string{`tidemark_messages_in_total{qos="1"} 6`, "tidemark_commit_duration_seconds_count", `tidemark_sessions{state="offline"}`,
		`tidemark_limit_hits_total{limit="inflight_bytes"} 0`, `tidemark_limit_hits_total{limit="queued_bytes"} 0`, gogc} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	// Contended locks are sampled, one in --lock-profile-rate.
	resp, err := http.Get("http://" + metricsAddr + "/debug/pprof/mutex?debug=1")
	if err != nil {
		t.Fatalf("mutex profile: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "sampling period=1") {
		t.Fatalf("the mutex profile does not sample every contended lock:\n%.300s", body)
	}
	resp, err = http.Get("http://" + metricsAddr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	srv.stop(t)
	// The 3.1.1 persistent session got the default expiry, a week.
	sessionExpiry(t, bin, dir, "e2e-sub", "604800s")

	// --session-expiry 0 (here from the environment) is never.
	t.Setenv("TIDEMARK_SESSION_EXPIRY", "0")
	srv = startServe(t, bin, cfg, mqttAddr)
	defer srv.stop(t)
	got := make(chan string, 16)
	sub = connectWith(t, mqttAddr, "e2e-sub", false, func(_ paho3.Client, m paho3.Message) { got <- string(m.Payload()) })
	for i := 0; i < 5; i++ {
		select {
		case p := <-got:
			if p != fmt.Sprint("q", i) {
				t.Fatalf("queued message %d = %q", i, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("queued message %d not delivered after restart", i)
		}
	}
	sub.Disconnect(100)
	fresh := connectWith(t, mqttAddr, "e2e-fresh", true, func(_ paho3.Client, m paho3.Message) { got <- string(m.Payload()) })
	if tok := fresh.Subscribe("e2e/retained", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	select {
	case p := <-got:
		if p != "kept" {
			t.Fatalf("retained = %q", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("retained message lost across the restart")
	}
	fresh.Disconnect(100)
	srv.stop(t)
	sessionExpiry(t, bin, dir, "e2e-sub", "never")
}

// sessionExpiry checks the expiry `tidemark inspect` shows for client's
// session in the store under dir.
func sessionExpiry(t *testing.T, bin, dir, client, want string) {
	t.Helper()
	out, err := exec.Command(bin, "inspect", "--data", filepath.Join(dir, "data")).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == client {
			if f[3] != want {
				t.Fatalf("session %s expiry %s, want %s:\n%s", client, f[3], want, out)
			}
			return
		}
	}
	t.Fatalf("inspect lists no session %s:\n%s", client, out)
}

// serveProc is a `tidemark serve` child process.
type serveProc struct{ *proc.Proc }

// startServe runs `tidemark serve --config cfg` and waits until it
// listens on addr; it is killed when the test ends.
func startServe(t *testing.T, bin, cfg, addr string) *serveProc {
	t.Helper()
	p, err := proc.Start(proc.Spec{Name: "tidemark serve", Bin: bin, Args: []string{"serve", "--config", cfg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	// Generous: a store reopened after SIGKILL replays its log first,
	// and a long crash loop may run on a loaded machine.
	if err := p.WaitListen(t.Context(), addr, 60*time.Second, nil); err != nil {
		p.Kill()
		t.Fatalf("%v\n%s", err, p.Log())
	}
	return &serveProc{p}
}

// stop ends the process with SIGTERM and checks it stopped cleanly.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	if !p.Running() {
		return
	}
	if err := p.Stop(15 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, p.Log())
	}
	if !strings.Contains(p.Log(), "stopped") {
		t.Fatalf("no clean stop in the log:\n%s", p.Log())
	}
}

// scrapeMetrics returns what a serve child process's /metrics on addr
// serves.
func scrapeMetrics(t *testing.T, addr string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return body
}

// freeAddr returns a loopback address for a serve child process to bind.
func freeAddr(t *testing.T) string { return freeport.MustAddr(t) }

func connect(t *testing.T, addr, id string, clean bool) paho3.Client {
	return connectWith(t, addr, id, clean, nil)
}

func connectWith(t *testing.T, addr, id string, clean bool, h paho3.MessageHandler) paho3.Client {
	t.Helper()
	o := paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(false).SetOrderMatters(true).SetDefaultPublishHandler(h)
	c := paho3.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect %s: %v", id, tok.Error())
	}
	return c
}

func publish(t *testing.T, c paho3.Client, topic string, retain bool, payload string) {
	t.Helper()
	if tok := c.Publish(topic, 1, retain, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
}
