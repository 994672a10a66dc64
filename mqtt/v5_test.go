package mqtt_test

// MQTT 5.0 behaviour, driven by paho.golang (and the raw client where a
// library cannot express the exchange).

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Every publish QoS reaches every subscription QoS at the lower of the two
// [MQTT-3.8.4-8] (5.0: [MQTT-3.8.4-8] granted QoS, 4.3 delivery).
func TestQoSMatrix5(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "sub", true, 0)
	for q := byte(0); q < 3; q++ {
		sub.sub(fmt.Sprintf("m/%d", q), q)
	}
	pub := connect5(t, s.Addr, "pub", true, 0)
	for sq := byte(0); sq < 3; sq++ {
		for pq := byte(0); pq < 3; pq++ {
			payload := fmt.Sprintf("p%d", pq)
			pub.pub(fmt.Sprintf("m/%d", sq), pq, false, payload)
			m := sub.expectOne(fmt.Sprintf("m/%d", sq), payload)
			if want := min(sq, pq); m.QoS != want {
				t.Errorf("sub QoS %d, pub QoS %d: delivered at QoS %d, want %d", sq, pq, m.QoS, want)
			}
		}
	}
}

// Clean start discards the session; without it the session and its
// subscriptions resume, and CONNACK says whether a session was present
// [MQTT-3.1.2-4] [MQTT-3.1.2-5] [MQTT-3.2.2-2] [MQTT-3.2.2-3].
func TestCleanStartSessionPresent5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "cs", false, 60)
	if c.ack.SessionPresent {
		t.Fatal("session present on the first connect")
	}
	c.sub("cs/t", 1)
	c.close()

	pub := connect5(t, s.Addr, "cs-pub", true, 0)
	pub.pub("cs/t", 1, false, "queued")

	c = connect5(t, s.Addr, "cs", false, 60)
	if !c.ack.SessionPresent {
		t.Fatal("session not present on resume")
	}
	c.expectOne("cs/t", "queued")
	pub.pub("cs/t", 1, false, "live")
	c.expectOne("cs/t", "live")
	c.close()

	c = connect5(t, s.Addr, "cs", true, 60)
	if c.ack.SessionPresent {
		t.Fatal("session present after clean start [MQTT-3.2.2-2]")
	}
	pub.pub("cs/t", 1, false, "after clean")
	c.expectNone(300 * time.Millisecond)
}

// A session with a short expiry is gone once it passed; within it, it
// resumes [MQTT-3.1.2-23] (4.1.2 session expiry).
func TestSessionExpiry5(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	pub := connect5(t, s.Addr, "se-pub", true, 0)

	short := connect5(t, s.Addr, "se-short", false, 1)
	short.sub("se/t", 1)
	long := connect5(t, s.Addr, "se-long", false, 60)
	long.sub("se/t", 1)
	short.close()
	long.close()
	pub.pub("se/t", 1, false, "while offline")
	time.Sleep(2500 * time.Millisecond)

	short = connect5(t, s.Addr, "se-short", false, 1)
	if short.ack.SessionPresent {
		t.Fatal("expired session still present")
	}
	short.expectNone(300 * time.Millisecond)
	long = connect5(t, s.Addr, "se-long", false, 60)
	if !long.ack.SessionPresent {
		t.Fatal("unexpired session lost")
	}
	long.expectOne("se/t", "while offline")

	// Session expiry 0 (the default): the session ends with the connection.
	zero := connect5(t, s.Addr, "se-zero", false, 0)
	zero.sub("se/t", 1)
	zero.close()
	zero = connect5(t, s.Addr, "se-zero", false, 0)
	if zero.ack.SessionPresent {
		t.Fatal("session with expiry 0 present after reconnect")
	}
}

// The expiry set on DISCONNECT replaces the CONNECT's [MQTT-3.14.2-2 for
// the 0 case is covered by the raw tests].
func TestSessionExpiryOnDisconnect5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "sed", false, 60)
	c.sub("sed/t", 1)
	_ = c.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: u32(0)}})
	<-c.Done()
	time.Sleep(100 * time.Millisecond)
	c = connect5(t, s.Addr, "sed", false, 60)
	if c.ack.SessionPresent {
		t.Fatal("session kept after DISCONNECT set its expiry to 0")
	}
}

// A second connection with the same client id takes the session over: the
// first is sent DISCONNECT 0x8E and closed, the session goes on
// [MQTT-3.1.4-2] [MQTT-3.1.4-3].
func TestSessionTakeover5(t *testing.T) {
	s := startBroker(t)
	first := connect5(t, s.Addr, "to", false, 60)
	first.sub("to/t", 1)
	second := connect5(t, s.Addr, "to", false, 60)
	if rc := first.expectDisconnect(); rc != byte(packet.SessionTakenOver) {
		t.Fatalf("old connection got DISCONNECT %#x, want 0x8E", rc)
	}
	select {
	case <-first.Done():
	case <-time.After(wait):
		t.Fatal("old connection not closed")
	}
	if !second.ack.SessionPresent {
		t.Fatal("session not present for the new connection")
	}
	pub := connect5(t, s.Addr, "to-pub", true, 0)
	pub.pub("to/t", 1, false, "x")
	second.expectOne("to/t", "x")
}

// A client silent for 1.5 times its keep alive is disconnected with 0x8D
// and its will is published [MQTT-3.1.2-22] [MQTT-3.1.2-8].
func TestKeepAliveTimeout5(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	watcher := connect5(t, s.Addr, "ka-watch", true, 0)
	watcher.sub("ka/will", 0)
	cp := connect5Packet("ka", true, 0)
	cp.KeepAlive = 1
	cp.Will = &packet.Will{Topic: "ka/will", Payload: []byte("gone")}
	r, _ := connectRaw(t, s.Addr, cp)
	start := time.Now()
	if rc := r.ExpectClose(); rc != int(packet.KeepAliveTimeout) {
		t.Fatalf("DISCONNECT reason %#x, want 0x8D", rc)
	}
	if el := time.Since(start); el < time.Second || el > 5*time.Second {
		t.Fatalf("closed after %v, want about 1.5 s", el)
	}
	watcher.expectOne("ka/will", "gone")

	// A PINGREQ within the keep alive keeps the connection.
	r, _ = connectRaw(t, s.Addr, cp)
	for i := 0; i < 3; i++ {
		time.Sleep(600 * time.Millisecond)
		r.Send(&packet.Pingreq{})
		if _, ok := r.Read("packet").(*packet.Pingresp); !ok {
			t.Fatal("no PINGRESP")
		}
	}
}

// Wills: sent on an abnormal close and on DISCONNECT 0x04, not on a normal
// DISCONNECT; a will delay is honoured and a reconnect cancels it
// [MQTT-3.1.2-8] [MQTT-3.1.2-10] [MQTT-3.14.4-3] [MQTT-3.1.3-9].
func TestWill5(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	w := connect5(t, s.Addr, "will-watch", true, 0)
	w.sub("will/#", 1)

	withWill := func(id, payload string, delay uint32, expiry uint32) *paho.Connect {
		cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
			WillMessage: &paho.WillMessage{Topic: "will/" + id, Payload: []byte(payload), QoS: 1}}
		if delay > 0 {
			cp.WillProperties = &paho.WillProperties{WillDelayInterval: u32(delay)}
		}
		if expiry > 0 {
			cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: u32(expiry)}
		}
		return cp
	}

	t.Run("abnormal close", func(t *testing.T) {
		c, err := dial5(t, s.Addr, withWill("a", "abnormal", 0, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.TerminateConnectionForTest()
		w.expectOne("will/a", "abnormal")
	})
	t.Run("normal disconnect", func(t *testing.T) {
		c, err := dial5(t, s.Addr, withWill("n", "normal", 0, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.close()
		w.expectNone(500 * time.Millisecond)
	})
	t.Run("disconnect with will", func(t *testing.T) {
		c, err := dial5(t, s.Addr, withWill("d", "asked", 0, 0), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0x04})
		w.expectOne("will/d", "asked")
	})
	t.Run("delay honoured", func(t *testing.T) {
		c, err := dial5(t, s.Addr, withWill("dl", "late", 1, 60), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.TerminateConnectionForTest()
		start := time.Now()
		w.expectOne("will/dl", "late")
		if el := time.Since(start); el < 800*time.Millisecond {
			t.Fatalf("delayed will sent after %v, want >= 1 s", el)
		}
	})
	t.Run("delay cancelled by reconnect", func(t *testing.T) {
		c, err := dial5(t, s.Addr, withWill("dc", "cancelled", 2, 60), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.TerminateConnectionForTest()
		time.Sleep(300 * time.Millisecond)
		cp := withWill("dc", "cancelled", 2, 60)
		cp.CleanStart = false
		cp.WillMessage = nil
		cp.WillProperties = nil
		if _, err := dial5(t, s.Addr, cp, nil); err != nil {
			t.Fatal(err)
		}
		w.expectNone(2500 * time.Millisecond)
	})
	t.Run("delay capped by session expiry", func(t *testing.T) {
		// The session ends (expiry 1 s) before the 30 s will delay: the
		// will goes then [MQTT-3.1.2-8, 3.1.3.2.2].
		c, err := dial5(t, s.Addr, withWill("ce", "capped", 30, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.TerminateConnectionForTest()
		w.expectOne("will/ce", "capped")
	})
}

// A zero-length client id gets an assigned one in 5.0 [MQTT-3.1.3-6]
// [MQTT-3.2.2-16].
func TestAssignedClientID5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "", true, 0)
	id := c.ack.Properties.AssignedClientID
	if id == "" {
		t.Fatal("no assigned client identifier")
	}
	c2 := connect5(t, s.Addr, "", true, 0)
	if c2.ack.Properties.AssignedClientID == id {
		t.Fatal("two clients got the same assigned id")
	}
	c.sub("aid/t", 1)
	c2.pub("aid/t", 1, false, "x")
	c.expectOne("aid/t", "x")
}

// + and # match per level; filters starting with a wildcard do not match
// $-topics [MQTT-4.7.1-1] [MQTT-4.7.1-2] [MQTT-4.7.1-3] [MQTT-4.7.2-1].
func TestWildcards5(t *testing.T) {
	s := startBroker(t)
	pub := connect5(t, s.Addr, "wc-pub", true, 0)
	cases := []struct {
		filter string
		match  []string
	}{
		{"sport/tennis/+", []string{"sport/tennis/player1", "sport/tennis/"}},
		{"sport/#", []string{"sport", "sport/tennis/player1", "sport/tennis/player1/ranking", "sport/tennis/", "sport/"}},
		{"+/tennis/#", []string{"sport/tennis/player1", "sport/tennis/player1/ranking", "sport/tennis/"}},
		{"+", []string{"sport", "finance"}},
		{"/+", []string{"/finance"}},
		{"+/+", []string{"sport/", "/finance", "a/b"}},
		{"#", []string{"sport", "sport/tennis/player1", "sport/tennis/player1/ranking", "sport/tennis/", "sport/", "finance", "/finance", "a/b"}},
		{"$SYS/#", []string{"$SYS/broker/load"}},
		{"$SYS/+/load", []string{"$SYS/broker/load"}},
	}
	topics := []string{"sport", "sport/tennis/player1", "sport/tennis/player1/ranking", "sport/tennis/", "sport/", "finance", "/finance", "a/b", "$SYS/broker/load", "$other"}
	for _, tc := range cases {
		t.Run(tc.filter, func(t *testing.T) {
			sub := connect5(t, s.Addr, "wc-sub", true, 0)
			sub.sub(tc.filter, 1)
			for _, tp := range topics {
				pub.pub(tp, 1, false, tp)
			}
			got := sub.expect(len(tc.match))
			sub.expectNone(200 * time.Millisecond)
			var gotTopics []string
			for _, m := range got {
				gotTopics = append(gotTopics, m.Topic)
			}
			if !slices.Equal(gotTopics, tc.match) {
				t.Fatalf("filter %q got %v, want %v", tc.filter, gotTopics, tc.match)
			}
			sub.close()
		})
	}
}

// Each message of a shared subscription goes to one member of the group;
// a plain subscription beside it still gets every one [MQTT-4.8.2-?,
// 5.0 4.8.2].
func TestSharedSubscriptions5(t *testing.T) {
	s := startBroker(t)
	a := connect5(t, s.Addr, "sh-a", true, 0)
	b := connect5(t, s.Addr, "sh-b", true, 0)
	plain := connect5(t, s.Addr, "sh-plain", true, 0)
	a.sub("$share/g/sh/+", 1)
	b.sub("$share/g/sh/+", 1)
	plain.sub("sh/+", 1)
	pub := connect5(t, s.Addr, "sh-pub", true, 0)
	const n = 20
	for i := 0; i < n; i++ {
		pub.pub("sh/x", byte(i%3), false, fmt.Sprint(i))
	}
	plain.expect(n)
	seen := map[string]int{}
	counts := map[string]int{}
	deadline := time.After(wait)
	for len(seen) < n {
		select {
		case m := <-a.msgs:
			seen[string(m.Payload)]++
			counts["a"]++
		case m := <-b.msgs:
			seen[string(m.Payload)]++
			counts["b"]++
		case <-deadline:
			t.Fatalf("group got %d of %d messages", len(seen), n)
		}
	}
	a.expectNone(200 * time.Millisecond)
	b.expectNone(0)
	for p, k := range seen {
		if k != 1 {
			t.Errorf("message %s delivered %d times to the group", p, k)
		}
	}
	if counts["a"] == 0 || counts["b"] == 0 {
		t.Errorf("one member got everything: %v", counts)
	}
}

// No local: a client's own messages do not come back on that subscription
// [MQTT-3.8.3-3].
func TestNoLocal5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "nl", true, 0)
	other := connect5(t, s.Addr, "nl-other", true, 0)
	c.subOpts(nil, paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true})
	for q := byte(0); q < 3; q++ {
		c.pub("nl/own", q, false, "own")
	}
	other.pub("nl/other", 1, false, "other")
	c.expectOne("nl/other", "other")
	c.expectNone(200 * time.Millisecond)
}

// Retain as published keeps the RETAIN flag on forwarded messages;
// without it the flag is cleared [MQTT-3.3.1-12] [MQTT-3.3.1-13].
func TestRetainAsPublished5(t *testing.T) {
	s := startBroker(t)
	keep := connect5(t, s.Addr, "rap-keep", true, 0)
	clear := connect5(t, s.Addr, "rap-clear", true, 0)
	keep.subOpts(nil, paho.SubscribeOptions{Topic: "rap/+", QoS: 1, RetainAsPublished: true})
	clear.subOpts(nil, paho.SubscribeOptions{Topic: "rap/+", QoS: 1})
	pub := connect5(t, s.Addr, "rap-pub", true, 0)
	for q := byte(0); q < 3; q++ {
		topic := fmt.Sprintf("rap/%d", q)
		pub.pub(topic, q, true, "r")
		if m := keep.expectOne(topic, "r"); !m.Retain {
			t.Errorf("QoS %d: retain as published lost the RETAIN flag", q)
		}
		if m := clear.expectOne(topic, "r"); m.Retain {
			t.Errorf("QoS %d: RETAIN set on a live message without retain as published", q)
		}
	}
}

// Retain handling 0 sends retained messages on every subscribe, 1 only on
// a new subscription, 2 never [MQTT-3.3.1-9] [MQTT-3.3.1-10] [MQTT-3.3.1-11].
func TestRetainHandling5(t *testing.T) {
	s := startBroker(t)
	pub := connect5(t, s.Addr, "rh-pub", true, 0)
	pub.pub("rh/t", 1, true, "kept")
	c := connect5(t, s.Addr, "rh", true, 0)
	for _, tc := range []struct {
		rh       byte
		first    bool
		repeated bool
	}{{0, true, true}, {1, true, false}, {2, false, false}} {
		f := []string{"rh/t", "rh/#", "rh/+"}[tc.rh]
		for _, want := range []bool{tc.first, tc.repeated} {
			c.subOpts(nil, paho.SubscribeOptions{Topic: f, QoS: 1, RetainHandling: tc.rh})
			if want {
				if m := c.expectOne("rh/t", "kept"); !m.Retain {
					t.Errorf("retain handling %d: retained message without RETAIN [MQTT-3.3.1-9]", tc.rh)
				}
			} else {
				c.expectNone(200 * time.Millisecond)
			}
		}
		if _, err := c.Unsubscribe(ctxT(t), &paho.Unsubscribe{Topics: []string{f}}); err != nil {
			t.Fatal(err)
		}
	}
}

// Retained messages: set, replaced, deleted by an empty payload, and a
// retained message with an empty payload is not itself stored
// [MQTT-3.3.1-5] [MQTT-3.3.1-6] [MQTT-3.3.1-7] [MQTT-3.3.1-8].
func TestRetained5(t *testing.T) {
	s := startBroker(t)
	pub := connect5(t, s.Addr, "ret-pub", true, 0)
	for q := byte(0); q < 3; q++ {
		topic := fmt.Sprintf("ret/%d", q)
		pub.pub(topic, q, true, "v1")
		pub.pub(topic, q, true, "v2")
	}
	pub.pub("ret/plain", 1, false, "not retained")
	c := connect5(t, s.Addr, "ret", true, 0)
	c.sub("ret/#", 2)
	got := c.expect(3)
	for _, m := range got {
		if string(m.Payload) != "v2" || !m.Retain {
			t.Errorf("retained %q = %q retain=%v, want v2 retained", m.Topic, m.Payload, m.Retain)
		}
		if q := m.Topic[len(m.Topic)-1] - '0'; m.QoS != q {
			t.Errorf("retained %q at QoS %d, want %d", m.Topic, m.QoS, q)
		}
	}
	c.expectNone(200 * time.Millisecond)
	for q := byte(0); q < 3; q++ {
		pub.pub(fmt.Sprintf("ret/%d", q), q, true, "")
	}
	c.expect(3) // the deletions themselves are forwarded
	c2 := connect5(t, s.Addr, "ret2", true, 0)
	c2.sub("ret/#", 2)
	c2.expectNone(300 * time.Millisecond)
}

// A message whose expiry passed is not delivered; one delivered later
// carries the remaining lifetime [MQTT-3.3.2-5] [MQTT-3.3.2-6].
func TestMessageExpiry5(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	c := connect5(t, s.Addr, "me", false, 60)
	c.sub("me/+", 1)
	c.close()
	pub := connect5(t, s.Addr, "me-pub", true, 0)
	pub.pubP(&paho.Publish{Topic: "me/short", QoS: 1, Payload: []byte("short"), Properties: &paho.PublishProperties{MessageExpiry: u32(1)}})
	pub.pubP(&paho.Publish{Topic: "me/long", QoS: 1, Payload: []byte("long"), Properties: &paho.PublishProperties{MessageExpiry: u32(60)}})
	pub.pubP(&paho.Publish{Topic: "me/ret", QoS: 1, Retain: true, Payload: []byte("ret"), Properties: &paho.PublishProperties{MessageExpiry: u32(1)}})
	time.Sleep(2100 * time.Millisecond)
	c = connect5(t, s.Addr, "me", false, 60)
	m := c.expectOne("me/long", "long")
	if m.Properties == nil || m.Properties.MessageExpiry == nil {
		t.Fatal("message expiry not forwarded")
	}
	if e := *m.Properties.MessageExpiry; e > 59 || e < 50 {
		t.Fatalf("forwarded message expiry %d, want the remaining ~58 s", e)
	}
	c.expectNone(200 * time.Millisecond)
	late := connect5(t, s.Addr, "me-late", true, 0)
	late.sub("me/ret", 1)
	late.expectNone(300 * time.Millisecond)
}

// User properties, response topic, correlation data, content type and
// payload format reach the subscriber unchanged [MQTT-3.3.2-17]
// [MQTT-3.3.2-18] [MQTT-3.3.2-20] [MQTT-3.3.2-4].
func TestPropertiesPassThrough5(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "pp", true, 0)
	sub.sub("pp/+", 2)
	pub := connect5(t, s.Addr, "pp-pub", true, 0)
	user := paho.UserProperties{{Key: "k", Value: "v1"}, {Key: "k", Value: "v2"}, {Key: "x", Value: ""}}
	for q := byte(0); q < 3; q++ {
		topic := fmt.Sprintf("pp/%d", q)
		pub.pubP(&paho.Publish{Topic: topic, QoS: q, Payload: []byte("req"), Properties: &paho.PublishProperties{
			ResponseTopic: "pp/reply", CorrelationData: []byte{0, 1, 2}, ContentType: "text/plain",
			PayloadFormat: func() *byte { b := byte(1); return &b }(), User: user}})
		m := sub.expectOne(topic, "req")
		p := m.Properties
		if p == nil || p.ResponseTopic != "pp/reply" || string(p.CorrelationData) != "\x00\x01\x02" || p.ContentType != "text/plain" ||
			p.PayloadFormat == nil || *p.PayloadFormat != 1 || !slices.Equal(p.User, user) {
			t.Fatalf("QoS %d: properties not passed through: %+v", q, p)
		}
	}
}

// The broker's receive maximum bounds the QoS 2 exchanges a client may
// leave open; past it the client is disconnected with 0x93
// [MQTT-3.3.4-7]; the client's receive maximum bounds what the broker
// sends unacknowledged [MQTT-3.3.4-9].
func TestReceiveMaximum5(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.ReceiveMaximum = 2 })
	t.Run("inbound", func(t *testing.T) {
		r, ack := connectRaw(t, s.Addr, connect5Packet("rm-in", true, 0))
		if !ack.Properties.Has(packet.PropReceiveMaximum) || ack.Properties.ReceiveMaximum != 2 {
			t.Fatalf("CONNACK receive maximum %v", ack.Properties.ReceiveMaximum)
		}
		for pi := uint16(1); pi <= 2; pi++ {
			r.Send(&packet.Publish{Topic: "rm/in", QoS: 2, PacketID: pi, Payload: []byte("x")})
			if rec, ok := r.Read("packet").(*packet.Pubrec); !ok || rec.PacketID != pi {
				t.Fatalf("no PUBREC for %d", pi)
			}
		}
		r.Send(&packet.Publish{Topic: "rm/in", QoS: 2, PacketID: 3, Payload: []byte("x")})
		if rc := r.ExpectClose(); rc != int(packet.ReceiveMaximumExceeded) {
			t.Fatalf("DISCONNECT %#x, want 0x93", rc)
		}
	})
	t.Run("outbound", func(t *testing.T) {
		cp := connect5Packet("rm-out", true, 0)
		cp.Properties.SetReceiveMaximum(3)
		r, _ := connectRaw(t, s.Addr, cp)
		expectWindow(t, r, connect5(t, s.Addr, "rm-pub", true, 0), "rm/out", 3)
	})
}

// expectWindow subscribes r to topic at QoS 1, publishes 2*window
// messages to it from pub, and checks that r is sent window of them
// unacknowledged, then one more for each PUBACK.
func expectWindow(t *testing.T, r *rawClient, pub *client5, topic string, window int) {
	t.Helper()
	r.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: topic, QoS: 1}}})
	if _, ok := r.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	for i := range 2 * window {
		pub.pub(topic, 1, false, fmt.Sprint(i))
	}
	var held []*packet.Publish
	for range window {
		held = append(held, r.ReadPublish())
	}
	r.Silence(300 * time.Millisecond)
	r.Send(&packet.Puback{PacketID: held[0].PacketID})
	if p := r.ReadPublish(); string(p.Payload) != fmt.Sprint(window) {
		t.Fatalf("after one PUBACK got %q, want message %d", p.Payload, window)
	}
	r.Silence(300 * time.Millisecond)
}

// MaxInflight bounds what the broker sends unacknowledged to a 3.1.1
// client, which announces no receive maximum, and to a 5.0 client whose
// receive maximum is larger.
func TestMaxInflight(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxInflight = 3 })
	pub := connect5(t, s.Addr, "mi-pub", true, 0)
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		t.Run(v.String(), func(t *testing.T) {
			cp := &packet.Connect{Version: v, ClientID: "mi-" + v.String(), CleanStart: true, KeepAlive: 30}
			if v == packet.V5 {
				cp.Properties.SetReceiveMaximum(100)
			}
			r, _ := connectRaw(t, s.Addr, cp)
			expectWindow(t, r, pub, "mi/"+v.String(), 3)
		})
	}
}

// The client's maximum packet size is respected: a message too large for
// it is not sent (and the next one is) [MQTT-3.1.2-24] [MQTT-3.1.2-25];
// an inbound packet over the broker's limit ends the connection with 0x95.
func TestMaximumPacketSize5(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxPacketSize = 1024 })
	c, err := dial5(t, s.Addr, &paho.Connect{ClientID: "mps", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{MaximumPacketSize: u32(200)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.sub("mps/+", 1)
	pub := connect5(t, s.Addr, "mps-pub", true, 0)
	big := string(make([]byte, 300))
	for q := byte(0); q < 3; q++ {
		pub.pub("mps/big", q, false, big)
		pub.pub("mps/small", q, false, "small")
		c.expectOne("mps/small", "small")
	}
	c.expectNone(200 * time.Millisecond)

	// At QoS 2 the dropped PUBLISH's exchange, stored before it was to
	// go out, ends with it: later ones keep coming, past the receive
	// maximum's worth of dropped ones.
	c2, err := dial5(t, s.Addr, &paho.Connect{ClientID: "mps2", CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{MaximumPacketSize: u32(200), ReceiveMaximum: u16(4)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2.sub("mps2/+", 2)
	for i := range 6 {
		pub.pub("mps2/big", 2, false, big)
		pub.pub("mps2/small", 2, false, fmt.Sprint("small ", i))
		c2.expectOne("mps2/small", fmt.Sprint("small ", i))
	}
	c2.expectNone(200 * time.Millisecond)

	r, _ := connectRaw(t, s.Addr, connect5Packet("mps-raw", true, 0))
	r.Send(&packet.Publish{Topic: "mps/in", QoS: 0, Payload: make([]byte, 2000)})
	if rc := r.ExpectClose(); rc != int(packet.PacketTooLarge) {
		t.Fatalf("DISCONNECT %#x, want 0x95", rc)
	}
	pub.pub("mps/small", 1, false, "still works")
	c.expectOne("mps/small", "still works")
}

// The broker's CONNACK states what it supports (3.2.2.3).
func TestConnackProperties5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "cp", true, 0)
	p := c.ack.Properties
	if p == nil || p.ReceiveMaximum == nil || p.MaximumPacketSize == nil || p.TopicAliasMaximum == nil {
		t.Fatalf("CONNACK properties missing: %+v", p)
	}
	if !p.WildcardSubAvailable || !p.SubIDAvailable || !p.SharedSubAvailable || !p.RetainAvailable {
		t.Fatalf("CONNACK availability flags: %+v", p)
	}
}

// A client closing its socket mid-session does not disturb others.
func TestAbruptClose5(t *testing.T) {
	s := startBroker(t)
	nc, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	c := connect5(t, s.Addr, "ac", true, 0)
	c.sub("ac", 0)
	c.pub("ac", 0, false, "x")
	c.expectOne("ac", "x")
}

// On a takeover the old connection's will is published when its delay is
// 0; a will with a delay is cancelled by the new connection [MQTT-3.1.4-3]
// [MQTT-3.1.2-8].
func TestWillOnTakeover5(t *testing.T) {
	s := startBroker(t)
	w := connect5(t, s.Addr, "wt-watch", true, 0)
	w.sub("wt/#", 1)
	for _, tc := range []struct {
		id    string
		delay uint32
		sent  bool
	}{{"wt0", 0, true}, {"wt5", 5, false}} {
		cp := &paho.Connect{ClientID: tc.id, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(60)},
			WillMessage: &paho.WillMessage{Topic: "wt/" + tc.id, Payload: []byte("will"), QoS: 1}}
		if tc.delay > 0 {
			cp.WillProperties = &paho.WillProperties{WillDelayInterval: u32(tc.delay)}
		}
		if _, err := dial5(t, s.Addr, cp, nil); err != nil {
			t.Fatal(err)
		}
		connect5(t, s.Addr, tc.id, false, 60)
		if tc.sent {
			w.expectOne("wt/"+tc.id, "will")
		} else {
			w.expectNone(500 * time.Millisecond)
		}
	}
}

// The DUP flag of an incoming PUBLISH is not propagated; first deliveries
// carry DUP 0 [MQTT-3.3.1-1] [MQTT-3.3.1-3].
func TestDupNotPropagated(t *testing.T) {
	s := startBroker(t)
	sub, _ := connectRaw(t, s.Addr, connect5Packet("dup-sub", true, 0))
	sub.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "dup/#", QoS: 2}}})
	if _, ok := sub.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub, _ := connectRaw(t, s.Addr, connect5Packet("dup-pub", true, 0))
	pub.Send(&packet.Publish{Topic: "dup/1", QoS: 1, PacketID: 1, Dup: true, Payload: []byte("x")})
	if _, ok := pub.Read("packet").(*packet.Puback); !ok {
		t.Fatal("no PUBACK")
	}
	if p := sub.ReadPublish(); p.Dup {
		t.Fatal("incoming DUP propagated to the subscriber")
	}
}

// Unsubscribing stops delivery; UNSUBACK says which filters existed
// [MQTT-3.10.4-1] [MQTT-3.10.4-4] [MQTT-3.10.4-5] [MQTT-3.11.3-1].
func TestUnsubscribe5(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "uns", true, 0)
	c.sub("uns/a", 1)
	c.sub("$share/g/uns/b", 1)
	ua, err := c.Unsubscribe(ctxT(t), &paho.Unsubscribe{Topics: []string{"uns/a", "uns/none", "$share/g/uns/b"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x00, 0x11, 0x00}; !slices.Equal(ua.Reasons, want) {
		t.Fatalf("UNSUBACK reasons % x, want % x", ua.Reasons, want)
	}
	c.pub("uns/a", 1, false, "x")
	c.pub("uns/b", 1, false, "y")
	c.expectNone(300 * time.Millisecond)
}

// Retained messages are not sent to a new shared subscription (5.0 4.8.2,
// 3.3.1.3).
func TestSharedSubscriptionNoRetained5(t *testing.T) {
	s := startBroker(t)
	pub := connect5(t, s.Addr, "shr-pub", true, 0)
	pub.pub("shr/t", 1, true, "kept")
	c := connect5(t, s.Addr, "shr", true, 0)
	c.sub("$share/g/shr/#", 1)
	c.expectNone(300 * time.Millisecond)
	pub.pub("shr/t", 1, false, "live")
	c.expectOne("shr/t", "live")
}

// The broker caps the session expiry a client asks for and says so in
// CONNACK (3.2.2.3.2).
func TestMaxSessionExpiry5(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxSessionExpiry = 60 * time.Second })
	c := connect5(t, s.Addr, "mse", false, 3600)
	p := c.ack.Properties
	if p == nil || p.SessionExpiryInterval == nil || *p.SessionExpiryInterval != 60 {
		t.Fatalf("CONNACK session expiry %+v, want 60", p)
	}
}

// A PUBREC with an error reason code ends an outbound QoS 2 exchange: no
// PUBREL follows and the receive-maximum slot is free again (4.3.3,
// 5.0 MQTT-4.9.0-2).
func TestPubrecErrorEndsExchange5(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("pre", true, 0)
	cp.Properties.SetReceiveMaximum(1)
	r, _ := connectRaw(t, s.Addr, cp)
	r.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "pre", QoS: 2}}})
	if _, ok := r.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connect5(t, s.Addr, "pre-pub", true, 0)
	pub.pub("pre", 2, false, "1")
	pub.pub("pre", 2, false, "2")
	p := r.ReadPublish()
	r.Send(&packet.Pubrec{PacketID: p.PacketID, ReasonCode: packet.UnspecifiedError})
	next := r.ReadPublish()
	if string(next.Payload) != "2" {
		t.Fatalf("after a refused PUBREC got %q, want the next message", next.Payload)
	}
}

// A will's message expiry counts from when the will is published, not
// from the CONNECT that carried it (3.1.3.2.4). (A raw client: paho.golang
// v0.23.0 does not send a will's Message Expiry Interval.)
func TestWillMessageExpiry5(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	w := connect5(t, s.Addr, "wme-watch", true, 0)
	w.sub("wme/#", 1)
	cp := connect5Packet("wme", true, 0)
	cp.Will = &packet.Will{Topic: "wme/will", Payload: []byte("late"), QoS: 1}
	cp.Will.Properties.SetMessageExpiry(1)
	r, _ := connectRaw(t, s.Addr, cp)
	time.Sleep(1500 * time.Millisecond) // longer than the will's expiry
	r.Conn().Close()
	m := w.expectOne("wme/will", "late")
	if m.Properties == nil || m.Properties.MessageExpiry == nil || *m.Properties.MessageExpiry != 1 {
		t.Fatalf("will message expiry %+v, want 1", m.Properties)
	}
}
