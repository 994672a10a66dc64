package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestTorture is the crash loop (conformance.Torture) against `tidemark
// serve` child processes, per engine: a few kills in `make test`, many in
// `make torture`. The environment sizes it:
//
//	TIDEMARK_TORTURE_ENGINES   engines, comma separated
//	                           (pebble,badger,lmdb,jetstream)
//	TIDEMARK_TORTURE_KILLS     SIGKILLs per engine (3)
//	TIDEMARK_TORTURE_MESSAGES  messages per publisher (1000; 4 publishers)
//	TIDEMARK_TORTURE_WINDOW    each publisher's PUBLISHes in flight (64)
//	TIDEMARK_TORTURE_ONLINE    subscribers online through the kills (2)
//	TIDEMARK_TORTURE_QOS       1 or 2: every publisher at that QoS (0:
//	                           QoS 1 and 2 in turn)
//	TIDEMARK_TORTURE_LOGS      a file to write the brokers' logs to, failed
//	                           or not (by default a failed run logs them)
func TestTorture(t *testing.T) {
	engines := strings.Split(envOr("TIDEMARK_TORTURE_ENGINES", "pebble,badger,lmdb,jetstream"), ",")
	kills := envInt(t, "TIDEMARK_TORTURE_KILLS", 3)
	msgs := envInt(t, "TIDEMARK_TORTURE_MESSAGES", 1000)
	window := envInt(t, "TIDEMARK_TORTURE_WINDOW", 64)
	online := envInt(t, "TIDEMARK_TORTURE_ONLINE", 2)
	qos := envInt(t, "TIDEMARK_TORTURE_QOS", 0)
	// The broker's --sync: under none and interval a process crash must
	// lose nothing acknowledged either.
	syncMode := envOr("TIDEMARK_TORTURE_SYNC", "always")
	if !slices.Contains([]string{"always", "interval", "none"}, syncMode) {
		t.Fatalf("TIDEMARK_TORTURE_SYNC=%q: want always, interval or none", syncMode)
	}
	bin := tidemarkBinary(t)
	for _, eng := range engines {
		eng = strings.TrimSpace(eng)
		t.Run(eng, func(t *testing.T) {
			logs := &brokerLogs{}
			t.Cleanup(func() {
				if f := os.Getenv("TIDEMARK_TORTURE_LOGS"); f != "" {
					if err := os.WriteFile(f, []byte(logs.all()), 0o644); err != nil {
						t.Errorf("broker logs: %v", err)
					}
				}
				if t.Failed() {
					t.Logf("broker logs:\n%s", logs.tail())
				}
			})
			rep := conformance.Torture(t, conformance.TortureOptions{
				Start: func(t conformance.T, dir, addr string) func() {
					return startKillable(t, bin, eng, dir, addr, logs, "sync: "+syncMode)
				},
				Addr:       freeAddr(t),
				Kills:      kills,
				Messages:   msgs,
				Publishers: 4,
				Window:     window,
				Online:     online,
				QoS:        packet.QoS(qos),
				// The checkpoint is written every 256 deliveries; the
				// publishers re-send up to 2 x window QoS 1 messages per
				// kill.
				MaxQoS1DupsPerKill: 768 + 4*window,
			})
			t.Logf("%s: %v", eng, rep)
		})
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number >= 0", name, v)
	}
	return n
}

// brokerLogs keeps what the brokers of one run wrote to stderr, in the
// order they ran.
type brokerLogs struct {
	mu  sync.Mutex
	buf strings.Builder
	n   int
}

// add records the stderr of the broker that ran next, ended by how.
func (l *brokerLogs) add(log, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	fmt.Fprintf(&l.buf, "--- broker %d (%s)\n%s", l.n, how, log)
}

// all returns the logs.
func (l *brokerLogs) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tail returns the last 64 KiB of the logs.
func (l *brokerLogs) tail() string {
	s := l.all()
	if len(s) > 64<<10 {
		s = "...\n" + s[len(s)-64<<10:]
	}
	return s
}

// startKillable starts `tidemark serve` on engine in dir at addr and
// returns a function that SIGKILLs it and waits until it is gone; the
// logs of each broker go to logs once it is gone, or at the test's end
// for the last. extra are more lines of its configuration file.
func startKillable(t conformance.T, bin, engine, dir, addr string, logs *brokerLogs, extra ...string) func() {
	t.Helper()
	cfg := filepath.Join(dir, "tidemark.yaml")
	conf := fmt.Sprintf("engine: %s\ndata: %s\nmqtt: %s\n", engine, filepath.Join(dir, "data"), addr)
	// The crash loop's offline subscriber must receive every message
	// however long it stays away: no queue limit, no session expiry,
	// unless the caller sets them.
	defaults := []string{"log-level: warn", "max-queued: 0", "session-expiry: 0"}
	for _, l := range extra {
		key, _, _ := strings.Cut(l, ":")
		if i := slices.IndexFunc(defaults, func(d string) bool { return strings.HasPrefix(d, key+":") }); i >= 0 {
			defaults[i] = l
			continue
		}
		conf += l + "\n"
	}
	conf += strings.Join(defaults, "\n") + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatalf("%v", err)
	}
	tt, ok := t.(*testing.T)
	if !ok {
		t.Fatalf("startKillable needs a *testing.T")
	}
	began := time.Now()
	p := startServe(tt, bin, cfg, addr)
	if d := time.Since(began); d > 10*time.Second {
		t.Logf("serve took %v to listen; its log:\n%s", d.Round(time.Millisecond), p.Log())
	}
	var once sync.Once
	keep := func(how string) { once.Do(func() { logs.add(p.Log(), how) }) }
	// Registered after startServe's own cleanup, so it runs first.
	tt.Cleanup(func() {
		p.Kill()
		keep("running at the end")
	})
	return func() {
		if !p.Kill() {
			t.Fatalf("serve did not end after SIGKILL")
		}
		keep("killed")
	}
}
