package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// TestReplayResumesAfterStoredPosition runs the client twice against a
// broker: the second run prints only what came after the first.
func TestReplayResumesAfterStoredPosition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := mqtt.New(db, mqtt.Options{History: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.Serve(ln) }()
	publish := func(topic, payload string) {
		t.Helper()
		if err := b.Publish(ctx, mqtt.Message{Topic: topic, QoS: 1, Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("sensors/a", "1")
	publish("other/a", "x")
	publish("sensors/b", "2")

	o := options{broker: ln.Addr().String(), filter: "sensors/#", from: "-1h", state: filepath.Join(t.TempDir(), "pos"), max: 2}
	var out bytes.Buffer
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if got, want := out.String(), "sensors/a 1\nsensors/b 2\n"; got != want {
		t.Fatalf("first run printed %q, want %q", got, want)
	}
	publish("sensors/c", "3")
	out.Reset()
	o.max = 1
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got, want := out.String(), "sensors/c 3\n"; got != want {
		t.Fatalf("second run printed %q, want %q (resumed after the stored position)", got, want)
	}
}
