package main_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/tidemark-io/tidemark/internal/tmpfs"
)

// TestServeDiskFull runs `tidemark serve` on a small tmpfs that fills up
// under QoS 1 load, then frees space: the publisher's connection ends at
// the full disk, /healthz fails while the store cannot write, and once
// space returns the same process takes publishes and connections again,
// and every acknowledged message reaches the persistent subscriber. The
// test mounts the tmpfs itself, so it needs the privilege to mount.
func TestServeDiskFull(t *testing.T) {
	for _, eng := range []string{"pebble", "lmdb", "badger", "jetstream"} {
		t.Run(eng, func(t *testing.T) { testServeDiskFull(t, eng) })
	}
}

func testServeDiskFull(t *testing.T, eng string) {
	dir := t.TempDir()
	mnt := tmpfs.Mount(t, 16)
	filler := filepath.Join(mnt, "filler")
	tmpfs.Fill(t, filler, 8<<20)

	bin := tidemarkBinary(t)
	mqttAddr, metricsAddr := freeAddr(t), freeAddr(t)
	cfg := filepath.Join(dir, "tidemark.yaml")
	conf := fmt.Sprintf("engine: %s\ndata: %s\nmqtt: %s\nmetrics: %s\n", eng, filepath.Join(mnt, "data"), mqttAddr, metricsAddr)
	switch eng {
	case "pebble":
		conf += "engine-param: [memtable_mb=1]\n"
	case "badger":
		// The default reserve (4 memtables) is more than the whole file
		// system: keep one MiB free beyond what a memtable flush takes.
		conf += "engine-param: [memtable_mb=32, reserve_mb=1]\n"
	case "jetstream":
		conf += "engine-param: [reserve_mb=1]\n"
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv := startServe(t, bin, cfg, mqttAddr)
	defer srv.stop(t)

	sub := connect(t, mqttAddr, "df-sub", false)
	if tok := sub.Subscribe("df/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)

	health := func() int {
		resp, err := http.Get("http://" + metricsAddr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := health(); code != http.StatusOK {
		t.Fatalf("/healthz before the disk filled: %d", code)
	}

	// Publish until the disk is full: the broker ends the connection
	// rather than acknowledge what it could not store.
	var mu sync.Mutex
	acked := map[string]bool{}
	// Incompressible, so the store's size is the payloads'.
	noise := make([]byte, 1000)
	rand.Read(noise)
	payload := hex.EncodeToString(noise)
	pub := connect(t, mqttAddr, "df-pub", false)
	// A window of publishes in flight, so filling takes seconds; each
	// counts as acknowledged only once its PUBACK came.
	type inflight struct {
		id  string
		tok paho3.Token
	}
	var window []inflight
	ack := func(f inflight, wait time.Duration) bool {
		// A token whose connection ended never completes here.
		deadline := time.Now().Add(wait)
		for !f.tok.WaitTimeout(20 * time.Millisecond) {
			if !pub.IsConnectionOpen() || time.Now().After(deadline) {
				return false
			}
		}
		if f.tok.Error() != nil {
			return false
		}
		mu.Lock()
		acked[f.id] = true
		mu.Unlock()
		return true
	}
	full := false
	for i := 0; i < 20000 && !full; i++ {
		id := fmt.Sprintf("m%05d", i)
		window = append(window, inflight{id, pub.Publish("df/"+id, 1, false, id+payload)})
		if len(window) < 16 {
			continue
		}
		full = !ack(window[0], 10*time.Second) || !pub.IsConnectionOpen()
		window = window[1:]
	}
	// The rest of the window: what the broker acknowledged before it
	// ended the connection counts, the others never will complete.
	for _, f := range window {
		ack(f, 100*time.Millisecond)
	}
	pub.Disconnect(0)
	if !full {
		t.Fatal("20,000 messages fit; the disk never filled")
	}
	t.Logf("disk full after %d acknowledged (%v in)", len(acked), time.Since(start).Round(time.Millisecond))
	if code := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz with the disk full: %d, want 503\n%s", code, srv.Log())
	}

	// Space returns: the same process recovers.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for health() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still failing after space returned:\n%s", srv.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("healthy again (%v in)", time.Since(start).Round(time.Millisecond))
	pub = connect(t, mqttAddr, "df-pub", false)
	for i := range 100 {
		id := fmt.Sprintf("n%05d", i)
		publish(t, pub, "df/"+id, false, id)
		acked[id] = true
	}
	pub.Disconnect(100)

	got := map[string]bool{}
	all := make(chan struct{})
	sub = connectWith(t, mqttAddr, "df-sub", false, func(_ paho3.Client, m paho3.Message) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimPrefix(m.Topic(), "df/")
		got[id] = true
		done := true
		for a := range acked {
			if !got[a] {
				done = false
				break
			}
		}
		if done && len(got) > 0 {
			select {
			case <-all:
			default:
				close(all)
			}
		}
	})
	defer sub.Disconnect(100)
	select {
	case <-all:
	case <-time.After(60 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	lost := 0
	for a := range acked {
		if !got[a] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged messages not delivered after recovery", lost, len(acked))
	}
	t.Logf("%s: %d messages acknowledged before the disk filled and after, all delivered (%v in)", eng, len(acked), time.Since(start).Round(time.Millisecond))
}
