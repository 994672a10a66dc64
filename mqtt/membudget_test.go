package mqtt_test

import (
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Over the memory budget (here 1 byte: always over) a publish is refused
// before it is stored: 5.0 QoS 1 and 2 get PUBACK and PUBREC 0x97 (quota
// exceeded) on a connection that stays open, QoS 0 is dropped, 3.1.1 loses
// the connection without a PUBACK, and nothing is delivered; each refusal
// is counted.
func TestMemoryBudgetRefusesPublishes(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxMemory = 1 })
	sub := connect5(t, s.Addr, "mb-sub", true, 0)
	sub.sub("mb/#", 2)
	pub := connect5(t, s.Addr, "mb-pub", true, 0)

	// The budget is sampled; the first sample is taken as the broker starts.
	refused := false
	for range 100 {
		r, err := pub.Publish(ctxT(t), &paho.Publish{Topic: "mb/q1", QoS: 1, Payload: []byte("no")})
		if r != nil && r.ReasonCode == byte(packet.QuotaExceeded) {
			refused = true
			break
		}
		if err != nil && r == nil {
			t.Fatalf("QoS 1 over the budget: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !refused {
		t.Fatal("QoS 1 publishes over a 1-byte memory budget were never refused with 0x97")
	}
	r, err := pub.Publish(ctxT(t), &paho.Publish{Topic: "mb/q2", QoS: 2, Payload: []byte("no")})
	if r == nil || r.ReasonCode != byte(packet.QuotaExceeded) {
		t.Fatalf("QoS 2 over the budget: %+v, %v; want PUBREC 0x97", r, err)
	}
	if _, err := pub.Publish(ctxT(t), &paho.Publish{Topic: "mb/q0", QoS: 0, Payload: []byte("no")}); err != nil {
		t.Fatalf("QoS 0 over the budget: %v", err)
	}

	raw, _ := connectRaw(t, s.Addr, &packet.Connect{Version: packet.V311, ClientID: "mb-raw3", CleanStart: true, KeepAlive: 30})
	raw.Send(&packet.Publish{QoS: packet.QoS1, PacketID: 1, Topic: "mb/v3", Payload: []byte("no")})
	if p, ok := raw.Next(wait); ok {
		t.Fatalf("3.1.1 over the budget: got %v, want the connection closed", p.Type())
	}

	sub.expectNone(200 * time.Millisecond)
	st := s.Broker().Stats()
	if st.LimitHits["memory"] < 4 || st.Dropped["memory"] != 1 {
		t.Fatalf("memory limit hits %d, dropped %d: want at least 4 refusals and 1 QoS 0 dropped", st.LimitHits["memory"], st.Dropped["memory"])
	}
	if st.MessagesIn[1] != 0 || st.MessagesIn[2] != 0 {
		t.Fatalf("messages taken over the budget: %v", st.MessagesIn)
	}
}
