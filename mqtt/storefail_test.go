package mqtt_test

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// A commit the store refuses because it cannot write (a full disk:
// engine.ErrWriteFailed) is never acknowledged: a 5.0 publisher gets
// DISCONNECT 0x97 (quota exceeded) and no PUBACK, a 3.1.1 one loses the
// connection; each failure is counted. Needs the fault hooks (-tags
// faults).
func TestStoreWriteFailureDisconnects(t *testing.T) {
	if !mqtt.HooksEnabled {
		t.Skip("needs the fault hooks: go test -tags faults")
	}
	var failing atomic.Bool
	full := fmt.Errorf("pebble: sync: %w: write 000002.log: %w", engine.ErrWriteFailed, syscall.ENOSPC)
	s := startBroker(t, func(o *mqtt.Options) {
		o.Hooks.Ack = func(k mqtt.Kind, client string) (<-chan struct{}, error) {
			if k == mqtt.KindPublish && failing.Load() {
				return nil, full
			}
			return nil, nil
		}
	})
	failing.Store(true)

	for _, v := range []packet.Version{packet.V5, packet.V311} {
		raw, _ := connectRaw(t, s.Addr, &packet.Connect{Version: v, ClientID: fmt.Sprintf("sf-%d", v), CleanStart: true, KeepAlive: 30})
		raw.Send(&packet.Publish{QoS: packet.QoS1, PacketID: 1, Topic: "sf/a", Payload: []byte("lost?")})
		p, got := raw.Next(wait)
		switch {
		case v == packet.V5:
			d, ok := p.(*packet.Disconnect)
			if !got || !ok || d.ReasonCode != packet.QuotaExceeded {
				t.Fatalf("5.0 publisher on a failing store: %v (%s); want DISCONNECT 0x97", p, raw.State())
			}
			if _, more := raw.Next(wait); more {
				t.Fatal("5.0 connection still open after DISCONNECT")
			}
		case got:
			t.Fatalf("3.1.1 publisher on a failing store: got %v, want the connection closed", p.Type())
		}
	}
	if n := s.Broker().Stats().StoreFailures; n != 2 {
		t.Fatalf("StoreFailures = %d, want 2", n)
	}
}
