package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/conformance"
)

// TestTorture is the crash loop (conformance.Torture) against `tidemark
// serve` child processes, per engine: a few kills in `make test`, many in
// `make torture`. The environment sizes it:
//
//	TIDEMARK_TORTURE_ENGINES   engines, comma separated (pebble,badger,lmdb;
//	                           jetstream may be named too)
//	TIDEMARK_TORTURE_KILLS     SIGKILLs per engine (3)
//	TIDEMARK_TORTURE_MESSAGES  messages per publisher (1000; 4 publishers)
func TestTorture(t *testing.T) {
	engines := strings.Split(envOr("TIDEMARK_TORTURE_ENGINES", "pebble,badger,lmdb"), ",")
	kills := envInt(t, "TIDEMARK_TORTURE_KILLS", 3)
	msgs := envInt(t, "TIDEMARK_TORTURE_MESSAGES", 1000)
	bin := tidemarkBinary(t)
	for _, eng := range engines {
		eng = strings.TrimSpace(eng)
		t.Run(eng, func(t *testing.T) {
			rep := conformance.Torture(t, conformance.TortureOptions{
				Start:      func(t conformance.T, dir, addr string) func() { return startKillable(t, bin, eng, dir, addr) },
				Addr:       freeAddr(t),
				Kills:      kills,
				Messages:   msgs,
				Publishers: 4,
				Window:     64,
				// The checkpoint is written every 256 deliveries; the
				// publishers re-send up to 2 x 64 QoS 1 messages per kill.
				MaxQoS1DupsPerKill: 1024,
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

// startKillable starts `tidemark serve` on engine in dir at addr and
// returns a function that SIGKILLs it and waits until it is gone; extra
// are more lines of its configuration file.
func startKillable(t conformance.T, bin, engine, dir, addr string, extra ...string) func() {
	t.Helper()
	cfg := filepath.Join(dir, "tidemark.yaml")
	conf := fmt.Sprintf("engine: %s\ndata: %s\nmqtt: %s\n", engine, filepath.Join(dir, "data"), addr)
	level := "log-level: warn"
	for _, l := range extra {
		if strings.HasPrefix(l, "log-level:") {
			level = l
			continue
		}
		conf += l + "\n"
	}
	conf += level + "\n"
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
		t.Logf("serve took %v to listen; its log:\n%s", d.Round(time.Millisecond), p.log.String())
	}
	return func() {
		_ = p.cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("serve did not end after SIGKILL")
		}
		_ = p.cmd.Wait()
		// Kept beside the data for a failure's diagnosis.
		if f, err := os.OpenFile(filepath.Join(dir, "serve.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.WriteString(p.log.String())
			f.Close()
		}
	}
}
