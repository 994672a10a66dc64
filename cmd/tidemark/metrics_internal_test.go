package main

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestSessionCountsCachedBetweenScrapes: the stored sessions are counted
// at the first scrape and then at most every sessionsEvery, not at every
// scrape (a count reads every session record).
func TestSessionCountsCachedBetweenScrapes(t *testing.T) {
	ctx := t.Context()
	srv := mqtttest.StartSync(t, "pebble", engine.SyncNone, mqtt.Options{})
	b, addr := srv.Broker(), srv.Addr

	// leave stores a persistent session: CONNECT with clean session
	// off, then DISCONNECT, and waits until the broker counts it offline.
	leave := func(id string, offline int) {
		t.Helper()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		w, r := packet.NewWriter(nc, packet.V311), packet.NewReader(nc, 1<<20)
		r.SetVersion(packet.V311)
		if err := w.WritePacket(&packet.Connect{Version: packet.V311, ClientID: id, KeepAlive: 30}); err != nil {
			t.Fatal(err)
		}
		if p, err := r.ReadPacket(); err != nil || p.Type() != packet.TypeConnack {
			t.Fatalf("CONNECT %s: %v, %v", id, p, err)
		}
		if err := w.WritePacket(&packet.Disconnect{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, off, err := b.SessionCounts(ctx); err == nil && off == offline {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s never counted offline", id)
			}
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(&brokerCollector{b: b, parts: srv.Parts(), engine: "pebble"})
	scrapeOffline := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tidemark_sessions" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "state" && l.GetValue() == "offline" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		t.Fatal("no tidemark_sessions{state=\"offline\"} in the scrape")
		return 0
	}
	leave("a", 1)
	if got := scrapeOffline(); got != 1 {
		t.Fatalf("first scrape: %v offline sessions, want 1", got)
	}
	leave("b", 2)
	if got := scrapeOffline(); got != 1 {
		t.Fatalf("a scrape right after the first counted the sessions again: %v offline, want the cached 1", got)
	}
}
