package mqtt_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// A wildcard subscription's retained messages are read in pages as the
// subscriber takes them: each matching one arrives once, those under the
// filter's prefix that do not match never, long topics (keyed by their
// hash) included, and after the last page the next PUBLISH is the live
// one that follows, not a retained message again. A subscriber that
// leaves in the middle of its pages harms neither the broker nor the
// next subscriber.
func TestRetainedReadInPages(t *testing.T) {
	s := startBroker(t)
	long := strings.Repeat("long", 200)
	want := map[string]bool{}
	publish := func(topic string, match bool) {
		t.Helper()
		m := mqtt.Message{Topic: topic, Payload: []byte(topic), QoS: 1, Retain: true}
		if err := s.Broker().Publish(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
		if match {
			want[topic] = true
		}
	}
	for i := range 700 {
		publish("rp/"+strconv.Itoa(i)+"/x", true)
		publish("rp/"+strconv.Itoa(i)+"/y", false)
	}
	// Enough that a page ends among them.
	for i := range 150 {
		publish("rp/"+long+strconv.Itoa(i)+"/x", true)
		publish("rp/"+long+strconv.Itoa(i)+"/y", false)
	}

	q := subscribeRaw5(t, s.Addr, "rp-quit", 1, "rp/#")
	q.ReadPublish()
	q.Conn().Close()

	sub := subscribeRaw5(t, s.Addr, "rp-sub", 10, "rp/+/x")
	got := map[string]bool{}
	for len(got) < len(want) {
		p := sub.ReadPublish()
		switch {
		case !want[p.Topic] || !p.Retain || string(p.Payload) != p.Topic:
			t.Fatalf("retained %.40q: %.40q, retain %v: not one of the %d matching", p.Topic, p.Payload, p.Retain, len(want))
		case got[p.Topic]:
			t.Fatalf("retained %.40q sent twice", p.Topic)
		}
		got[p.Topic] = true
		sub.Send(&packet.Puback{PacketID: p.PacketID})
	}
	if err := s.Broker().Publish(ctxT(t), mqtt.Message{Topic: "rp/live/x", Payload: []byte("live"), QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if p := sub.ReadPublish(); p.Topic != "rp/live/x" || p.Retain {
		t.Fatalf("after the %d retained: %.40q (retain %v), want the live rp/live/x", len(want), p.Topic, p.Retain)
	}
	if d := s.Broker().Stats().Dropped["slow"]; d != 0 {
		t.Fatalf("%d deliveries dropped as slow", d)
	}
}
