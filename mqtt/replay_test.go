package mqtt_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/mqtt"
)

// TestReplayWithPahoClients: a 5.0 client replays with the user property
// and gets positions; a 3.1.1 client replays with the filter prefix; a
// bad start is refused with a reason string naming the forms. (Every
// engine runs the replay cases R01-R07 in the conformance suite.)
func TestReplayWithPahoClients(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.History = time.Hour })
	pub := connect5(t, s.Addr, "rp-pub", true, 0)
	for _, p := range []string{"1", "2", "3"} {
		pub.pub("rp/t", 1, false, p)
	}

	c := connect5(t, s.Addr, "rp-5", true, 0)
	ack, err := c.Subscribe(ctxT(t), &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: "rp/#", QoS: 1}},
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: mqtt.PropReplayFrom, Value: "-1h"}}},
	})
	if err != nil || len(ack.Reasons) != 1 || ack.Reasons[0] != 1 {
		t.Fatalf("subscribe with a replay: %+v, %v", ack, err)
	}
	got := c.expect(3)
	var positions []string
	for i, m := range got {
		pos := m.Properties.User.Get(mqtt.PropPosition)
		if string(m.Payload) != []string{"1", "2", "3"}[i] || pos == "" {
			t.Fatalf("replayed message %d: %q at position %q", i, m.Payload, pos)
		}
		positions = append(positions, pos)
	}
	pub.pub("rp/t", 1, false, "4")
	if m := c.expectOne("rp/t", "4"); m.Properties.User.Get(mqtt.PropPosition) == "" {
		t.Fatalf("live message of a replaying subscription without a position")
	}

	from := connect5(t, s.Addr, "rp-from", true, 0)
	if _, err := from.Subscribe(ctxT(t), &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: "rp/#", QoS: 1}},
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: mqtt.PropReplayFrom, Value: positions[1]}}},
	}); err != nil {
		t.Fatal(err)
	}
	from.expectOne("rp/t", "3")
	from.expectOne("rp/t", "4")
	from.expectNone(300 * time.Millisecond)

	c3 := connect3(t, s.Addr, "rp-3", true)
	c3.sub(mqtt.ReplayPrefix+positions[0]+"/rp/#", 1)
	for _, p := range []string{"2", "3", "4"} {
		c3.expectOne("rp/t", p)
	}

	bad, err := c.Subscribe(ctxT(t), &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: "rp/#", QoS: 1}},
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: mqtt.PropReplayFrom, Value: "+15m"}}},
	})
	// paho.golang reports a refusal as an error beside the SUBACK.
	if bad == nil || len(bad.Reasons) != 1 || bad.Reasons[0] < 0x80 || bad.Properties == nil ||
		!strings.Contains(bad.Properties.ReasonString, "negative duration") {
		t.Fatalf("replay from +15m: %+v (%v), want a refusal saying a duration must be negative", bad, err)
	}
	// rp-5 replayed 1-3 (and maybe 4 before its handover), rp-from 3-4,
	// rp-3 2-4.
	st := s.Broker().Stats()
	if st.Replays["started"] != 3 || st.Replays["refused"] != 1 || st.MessagesReplayed < 8 {
		t.Fatalf("replay stats: %v, %d replayed; want 3 started, 1 refused, at least 8 replayed", st.Replays, st.MessagesReplayed)
	}
}
