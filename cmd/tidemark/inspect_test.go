package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// TestInspectListsSomeCountsAll: `tidemark inspect` counts every stored
// session and lists only as many as --sessions asks, and refuses a
// negative one naming the flag.
func TestInspectListsSomeCountsAll(t *testing.T) {
	bin := tidemarkBinary(t)
	var ss []mqtt.OfflineSession
	for i := range 5 {
		ss = append(ss, mqtt.OfflineSession{ClientID: fmt.Sprintf("insp-%d", i), Version: packet.V5, ExpirySeconds: 3600,
			Subscriptions: []topic.Subscription{{Filter: fmt.Sprintf("insp/%d", i), QoS: 1}}})
	}
	dir := storeSessions(t, "pebble", ss)
	out, err := exec.Command(bin, "inspect", "--data", dir, "--sessions", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "5 session(s), the first 2 listed") || !strings.Contains(s, "insp/1 qos1") || strings.Contains(s, "insp-2") {
		t.Fatalf("want 5 sessions counted and insp-0, insp-1 listed:\n%s", s)
	}
	out, err = exec.Command(bin, "inspect", "--data", dir, "--sessions", "-1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--sessions -1") {
		t.Fatalf("a negative --sessions was not refused by name: %v\n%s", err, out)
	}
	// A mistyped directory is refused, not made into an empty store; the
	// wrong engine is told which one wrote the store.
	missing := filepath.Join(t.TempDir(), "typo")
	out, err = exec.Command(bin, "inspect", "--data", missing).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no data directory there") {
		t.Fatalf("inspect of a missing directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("inspect created %s: %v", missing, err)
	}
	out, err = exec.Command(bin, "inspect", "--data", dir, "--engine", "badger").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "holds a pebble store") {
		t.Fatalf("inspect with another engine: %v\n%s", err, out)
	}
}

// TestInspectShowsRetentionRules: `tidemark inspect` shows the retention
// rules the broker last ran with and what each keeps in the log.
func TestInspectShowsRetentionRules(t *testing.T) {
	bin := tidemarkBinary(t)
	dir := t.TempDir()
	ctx := context.Background()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := mqtt.ParseRetention("keep/#=5msgs,none/#=1h")
	if err != nil {
		t.Fatal(err)
	}
	b, err := mqtt.New(db, mqtt.Options{Retention: rules})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := b.Publish(ctx, mqtt.Message{Topic: "keep/x", QoS: 1, Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	db.Close()
	e.Close()
	out, err := exec.Command(bin, "inspect", "--data", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	var keep, none string
	for _, line := range strings.Split(string(out), "\n") {
		switch f := strings.Fields(line); {
		case len(f) > 0 && f[0] == "keep/#":
			keep = strings.Join(f[:3], " ")
		case len(f) > 0 && f[0] == "none/#":
			none = strings.Join(f[:3], " ")
		}
	}
	if keep != "keep/# 5msgs 5" || none != "none/# 1h0m0s 0" {
		t.Fatalf("retention rows %q and %q, want keep/# keeping 5 messages and none/# none:\n%s", keep, none, out)
	}
}

// TestInspectTakesTheDirectorysEngine: without --engine, `tidemark inspect`
// and `tidemark serve` open a data directory with the engine that wrote
// it, not the default; with one, that one.
func TestInspectTakesTheDirectorysEngine(t *testing.T) {
	bin := tidemarkBinary(t)
	dir := storeSessions(t, "lmdb", []mqtt.OfflineSession{{ClientID: "insp-lmdb", Version: packet.V5, ExpirySeconds: 3600}})
	out, err := exec.Command(bin, "inspect", "--data", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "engine lmdb") || !strings.Contains(string(out), "insp-lmdb") {
		t.Fatalf("inspect of an LMDB directory without --engine: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "serve", "--data", dir, "--print-config").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "engine: lmdb  # the data directory's tidemark.engine") {
		t.Fatalf("serve --print-config on an LMDB directory without --engine: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "serve", "--data", dir, "--engine", "pebble", "--print-config").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "engine: pebble") {
		t.Fatalf("serve --print-config with --engine pebble: %v\n%s", err, out)
	}
}

// storeSessions writes ss, as offline sessions, to a new data directory of
// engine name and returns the directory, closed.
func storeSessions(t *testing.T, name string, ss []mqtt.OfflineSession) string {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	e, err := engine.Open(ctx, name, engine.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := mqtt.AddOfflineSessions(ctx, db, ss); err != nil {
		t.Fatal(err)
	}
	db.Close()
	e.Close()
	return dir
}
