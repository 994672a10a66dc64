package mqtt_test

// MQTT 3.1.1 behaviour, driven by paho.mqtt.golang.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Every publish QoS reaches every subscription QoS at the lower of the two
// [MQTT-3.8.4-6] (3.1.1: [MQTT-3.8.4-6] granted QoS, 4.3 delivery).
func TestQoSMatrix311(t *testing.T) {
	s := startBroker(t)
	sub := connect3(t, s.Addr, "sub3", true)
	for q := byte(0); q < 3; q++ {
		sub.sub(fmt.Sprintf("m3/%d", q), q)
	}
	pub := connect3(t, s.Addr, "pub3", true)
	for sq := byte(0); sq < 3; sq++ {
		for pq := byte(0); pq < 3; pq++ {
			payload := fmt.Sprintf("p%d", pq)
			pub.pub(fmt.Sprintf("m3/%d", sq), pq, false, payload)
			m := sub.expectOne(fmt.Sprintf("m3/%d", sq), payload)
			if want := min(sq, pq); m.Qos() != want {
				t.Errorf("sub QoS %d, pub QoS %d: delivered at QoS %d, want %d", sq, pq, m.Qos(), want)
			}
		}
	}
}

// 3.1.1 and 5.0 clients exchange messages through the one broker.
func TestMixedVersions(t *testing.T) {
	s := startBroker(t)
	c3 := connect3(t, s.Addr, "mix3", true)
	c5 := connect5(t, s.Addr, "mix5", true, 0)
	c3.sub("mix/5", 2)
	c5.sub("mix/3", 2)
	for q := byte(0); q < 3; q++ {
		c5.pub("mix/5", q, false, fmt.Sprint(q))
		c3.expectOne("mix/5", fmt.Sprint(q))
		c3.pub("mix/3", q, false, fmt.Sprint(q))
		if m := c5.expectOne("mix/3", fmt.Sprint(q)); m.QoS != q {
			t.Errorf("3.1.1 -> 5.0 at QoS %d, want %d", m.QoS, q)
		}
	}
}

// Clean session discards the session; without it subscriptions and queued
// QoS 1/2 messages survive a disconnect, QoS 0 ones are not queued, and
// CONNACK's session present says which [MQTT-3.1.2-4] [MQTT-3.1.2-5]
// [MQTT-3.1.2-6] [MQTT-3.2.2-1] [MQTT-3.2.2-2] [MQTT-3.2.2-3].
func TestCleanSession311(t *testing.T) {
	s := startBroker(t)
	c := connect3(t, s.Addr, "cs3", false)
	if c.present {
		t.Fatal("session present on the first connect")
	}
	c.sub("cs3/+", 2)
	c.close()
	pub := connect3(t, s.Addr, "cs3-pub", true)
	pub.pub("cs3/1", 1, false, "q1")
	pub.pub("cs3/2", 2, false, "q2")
	pub.pub("cs3/0", 0, false, "q0 is not queued")
	// A QoS 0 PUBLISH has no answer: the PUBACK of one behind it says the
	// broker handled it before the session came back.
	pub.pub("cs3-sync/0", 1, false, "sync")

	c = connect3(t, s.Addr, "cs3", false)
	if !c.present {
		t.Fatal("session not present on resume")
	}
	c.expectOne("cs3/1", "q1")
	c.expectOne("cs3/2", "q2")
	c.expectNone(200 * time.Millisecond)
	c.close()

	c = connect3(t, s.Addr, "cs3", true)
	if c.present {
		t.Fatal("session present with clean session [MQTT-3.2.2-1]")
	}
	c.close()
	// The clean session also discarded the stored one [MQTT-3.1.2-6].
	pub.pub("cs3/1", 1, false, "after clean")
	c = connect3(t, s.Addr, "cs3", false)
	if c.present {
		t.Fatal("a clean session's state outlived it")
	}
	c.expectNone(300 * time.Millisecond)
}

// The same client id connecting again closes the first connection
// [MQTT-3.1.4-2].
func TestSessionTakeover311(t *testing.T) {
	s := startBroker(t)
	lost := make(chan error, 1)
	first, _, err := dial3(t, s.Addr, "to3", false, func(o *paho3.ClientOptions) {
		o.SetConnectionLostHandler(func(_ paho3.Client, err error) { lost <- err })
	})
	if err != nil {
		t.Fatal(err)
	}
	first.sub("to3/t", 1)
	second := connect3(t, s.Addr, "to3", false)
	select {
	case err := <-lost:
		if err == nil {
			t.Fatal("the first connection was lost without an error")
		}
	case <-time.After(wait):
		t.Fatal("the first connection was not closed")
	}
	if !second.present {
		t.Fatal("session not present for the new connection")
	}
	pub := connect3(t, s.Addr, "to3-pub", true)
	pub.pub("to3/t", 1, false, "x")
	second.expectOne("to3/t", "x")
}

// The will is published when the connection ends without DISCONNECT
// (keep alive expiry included) and not after DISCONNECT, and a retained
// will is retained [MQTT-3.1.2-8] [MQTT-3.1.2-10] [MQTT-3.1.2-17]
// [MQTT-3.1.2-24].
func TestWill311(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	w := connect3(t, s.Addr, "will3-watch", true)
	w.sub("will3/#", 1)

	c, _, err := dial3(t, s.Addr, "w-normal", true, func(o *paho3.ClientOptions) { o.SetWill("will3/normal", "x", 1, false) })
	if err != nil {
		t.Fatal(err)
	}
	c.Disconnect(100)
	w.expectNone(400 * time.Millisecond)

	r := dialRaw(t, s.Addr, packet.V5)
	r.Send(&packet.Connect{Version: packet.V311, ClientID: "w-abrupt", CleanStart: true, KeepAlive: 30,
		Will: &packet.Will{Topic: "will3/abrupt", Payload: []byte("gone"), QoS: 1, Retain: true}})
	if _, ok := r.Read("packet").(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	r.Conn().Close()
	if m := w.expectOne("will3/abrupt", "gone"); m.Qos() != 1 {
		t.Errorf("will at QoS %d, want 1", m.Qos())
	}
	late := connect3(t, s.Addr, "will3-late", true)
	late.sub("will3/abrupt", 1)
	if m := late.expectOne("will3/abrupt", "gone"); !m.Retained() {
		t.Error("retained will not retained")
	}

	r = dialRaw(t, s.Addr, packet.V5)
	r.Send(&packet.Connect{Version: packet.V311, ClientID: "w-ka", CleanStart: true, KeepAlive: 1,
		Will: &packet.Will{Topic: "will3/ka", Payload: []byte("silent")}})
	if _, ok := r.Read("packet").(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	if rc := r.ExpectClose(); rc != -1 {
		t.Fatalf("3.1.1 connection got a DISCONNECT %#x", rc)
	}
	w.expectOne("will3/ka", "silent")
}

// A zero-length client id is accepted with clean session
// [MQTT-3.1.3-6] [MQTT-3.1.3-7] (refused without it: TestConnectRefusals).
func TestZeroLengthClientID311(t *testing.T) {
	s := startBroker(t)
	c, _, err := dial3(t, s.Addr, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.sub("z3", 1)
	c.pub("z3", 1, false, "x")
	c.expectOne("z3", "x")
	_, rc, err := dial3(t, s.Addr, "", false, nil)
	if err == nil || rc != 0x02 {
		t.Fatalf("empty id without clean session: rc %#x err %v, want 0x02", rc, err)
	}
}

// Wildcards and $-topics, as in 5.0 [MQTT-4.7.2-1].
func TestWildcards311(t *testing.T) {
	s := startBroker(t)
	c := connect3(t, s.Addr, "wc3", true)
	c.sub("#", 1)
	c.sub("+/status", 1)
	pub := connect3(t, s.Addr, "wc3-pub", true)
	pub.pub("$SYS/status", 1, false, "dollar")
	pub.pub("dev/status", 1, false, "plain")
	// One copy although two subscriptions match [MQTT-3.3.5-1 allows one].
	c.expectOne("dev/status", "plain")
	c.expectNone(300 * time.Millisecond)
}

// Shared subscriptions work for 3.1.1 clients too: one member per message.
func TestSharedSubscriptions311(t *testing.T) {
	s := startBroker(t)
	a := connect3(t, s.Addr, "sh3-a", true)
	b := connect3(t, s.Addr, "sh3-b", true)
	a.sub("$share/g3/sh3/#", 1)
	b.sub("$share/g3/sh3/#", 1)
	pub := connect3(t, s.Addr, "sh3-pub", true)
	const n = 12
	for i := 0; i < n; i++ {
		pub.pub("sh3/x", byte(i%3), false, fmt.Sprint(i))
	}
	seen := map[string]int{}
	counts := [2]int{}
	deadline := time.After(wait)
	for len(seen) < n {
		select {
		case m := <-a.msgs:
			seen[string(m.Payload())]++
			counts[0]++
		case m := <-b.msgs:
			seen[string(m.Payload())]++
			counts[1]++
		case <-deadline:
			t.Fatalf("group got %d of %d messages", len(seen), n)
		}
	}
	a.expectNone(200 * time.Millisecond)
	b.expectNone(0)
	for p, k := range seen {
		if k != 1 {
			t.Errorf("message %s delivered %d times", p, k)
		}
	}
	if counts[0] == 0 || counts[1] == 0 {
		t.Errorf("one member got everything: %v", counts)
	}
}

// Retained messages in 3.1.1: sent on subscribe with RETAIN set, replaced,
// deleted by an empty payload; live ones are forwarded without RETAIN
// [MQTT-3.3.1-5] [MQTT-3.3.1-8] [MQTT-3.3.1-9] [MQTT-3.3.1-10]
// [MQTT-3.3.1-11].
func TestRetained311(t *testing.T) {
	s := startBroker(t)
	pub := connect3(t, s.Addr, "ret3-pub", true)
	pub.pub("ret3/a", 1, true, "one")
	pub.pub("ret3/a", 2, true, "two")
	pub.pub("ret3/b", 0, true, "b")
	live := connect3(t, s.Addr, "ret3-live", true)
	live.sub("ret3/#", 1)
	got := map[string]string{}
	for _, m := range live.expect(2) {
		if !m.Retained() {
			t.Errorf("retained %q sent without RETAIN", m.Topic())
		}
		got[m.Topic()] = string(m.Payload())
	}
	if got["ret3/a"] != "two" || got["ret3/b"] != "b" {
		t.Fatalf("retained set %v", got)
	}
	pub.pub("ret3/a", 1, true, "three")
	if m := live.expectOne("ret3/a", "three"); m.Retained() {
		t.Error("live message forwarded with RETAIN [MQTT-3.3.1-9]")
	}
	pub.pub("ret3/b", 1, true, "")
	live.expect(1)
	late := connect3(t, s.Addr, "ret3-late", true)
	late.sub("ret3/#", 1)
	late.expectOne("ret3/a", "three")
	late.expectNone(300 * time.Millisecond)
}

// TestRetainedByFilter311 checks which retained messages a new
// subscription receives by the shape of its filter: a filter without
// wildcards gets its one topic's, "x/#" also the parent "x", "+" matches
// any first level, and a topic that only shares leading characters with
// a filter's levels gets nothing.
func TestRetainedByFilter311(t *testing.T) {
	s := startBroker(t)
	pub := connect3(t, s.Addr, "retf-pub", true)
	for _, tp := range []string{"retf/a", "retf/a/b", "retf/ab", "retf/abc/d", "other/a"} {
		pub.pub(tp, 1, true, tp)
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"retf/a", []string{"retf/a"}},
		{"retf/a/#", []string{"retf/a", "retf/a/b"}},
		{"retf/+", []string{"retf/a", "retf/ab"}},
		{"+/a", []string{"other/a", "retf/a"}},
		{"retf/ab/#", []string{"retf/ab"}},
		{"retf/a/b/c", nil},
	} {
		c := connect3(t, s.Addr, "retf-sub", true)
		c.sub(tc.filter, 1)
		var got []string
		for _, m := range c.expect(len(tc.want)) {
			if string(m.Payload()) != m.Topic() || !m.Retained() {
				t.Errorf("%s: got %q on %s (retained %v)", tc.filter, m.Payload(), m.Topic(), m.Retained())
			}
			got = append(got, m.Topic())
		}
		c.expectNone(200 * time.Millisecond)
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: retained %v, want %v", tc.filter, got, tc.want)
		}
		c.close()
	}
}
