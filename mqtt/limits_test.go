package mqtt_test

// Limits on what a client can grow, long topics on every engine, and the
// reason code of a DISCONNECT reaching a client that is still sending.

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// longTopic returns a topic of n bytes.
func longTopic(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix))
}

// A topic of any length MQTT allows is stored and delivered on every
// engine: a 3.1.1 QoS 1 PUBLISH with a 600-byte topic, a 5.0 QoS 2 one
// with 3,000 bytes, a retained one at the protocol's 65,535, and a
// persistent session's subscription to it across a reconnect.
func TestLongTopicEveryEngine(t *testing.T) {
	for _, name := range engine.Drivers() {
		t.Run(name, func(t *testing.T) {
			s := mqtttest.Start(t, name, nil, mqtt.Options{})
			t600, t3000, tMax := longTopic("lt/600/", 600), longTopic("lt/3000/", 3000), longTopic("lt/max/", mqtt.MaxTopicLength)

			sub := connect5(t, s.Addr, "lt-sub", true, 0)
			sub.sub("lt/#", 2)
			pub3 := connect3(t, s.Addr, "lt-pub3", true)
			pub3.pub(t600, 1, false, "qos1")
			sub.expectOne(t600, "qos1")
			pub5 := connect5(t, s.Addr, "lt-pub5", true, 0)
			pub5.pub(t3000, 2, false, "qos2")
			sub.expectOne(t3000, "qos2")
			pub5.pub(tMax, 1, true, "retained")
			sub.expectOne(tMax, "retained")

			// The retained message is a record keyed by its topic.
			late := connect5(t, s.Addr, "lt-late", true, 0)
			late.sub(tMax, 1)
			if m := late.expectOne(tMax, "retained"); !m.Retain {
				t.Fatal("retained message with a 65,535-byte topic delivered without RETAIN")
			}

			// A persistent session subscribed to a long filter catches up.
			p := connect5(t, s.Addr, "lt-persist", false, 3600)
			p.sub(t3000, 1)
			p.close()
			pub5.pub(t3000, 1, false, "while offline")
			p = connect5(t, s.Addr, "lt-persist", false, 3600)
			p.expectOne(t3000, "while offline")
		})
	}
}

// A topic over the configured length is refused before anything is
// acknowledged: 5.0 QoS 1 and 2 get PUBACK and PUBREC 0x90 (the client
// stops re-sending), 3.1.1 loses the connection without a PUBACK, and a
// filter over the limit gets SUBACK 0x8F. Nothing is delivered.
func TestTopicLengthLimit(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxTopicLength = 100; o.MaxTopicLevels = 4 })
	sub := connect5(t, s.Addr, "tl-sub", true, 0)
	sub.sub("tl/#", 2)
	long := longTopic("tl/", 101)

	pub := connect5(t, s.Addr, "tl-pub", true, 0)
	for _, qos := range []byte{1, 2} {
		r, err := pub.Publish(ctxT(t), &paho.Publish{Topic: long, QoS: qos, Payload: []byte("no")})
		if r == nil || r.ReasonCode != byte(packet.TopicNameInvalid) {
			t.Fatalf("QoS %d over the topic length: %+v, %v; want reason 0x90", qos, r, err)
		}
	}
	r, err := pub.Publish(ctxT(t), &paho.Publish{Topic: "tl/a/b/c/d", QoS: 1, Payload: []byte("no")})
	if r == nil || r.ReasonCode != byte(packet.TopicNameInvalid) {
		t.Fatalf("QoS 1 over the topic levels: %+v, %v; want reason 0x90", r, err)
	}
	pub.pub("tl/ok", 1, false, "yes") // the connection is still fine
	sub.expectOne("tl/ok", "yes")

	raw, _ := connectRaw(t, s.Addr, &packet.Connect{Version: packet.V311, ClientID: "tl-raw3", CleanStart: true, KeepAlive: 30})
	raw.Send(&packet.Publish{QoS: packet.QoS1, PacketID: 1, Topic: long, Payload: []byte("no")})
	if p, ok := raw.Next(wait); ok {
		t.Fatalf("3.1.1 over the topic length: got %v, want the connection closed", p.Type())
	}

	sa, err := sub.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: long, QoS: 1}}})
	if sa == nil || sa.Reasons[0] != byte(packet.TopicFilterInvalid) { // paho reports the refusal as err too
		t.Fatalf("filter over the topic length: %+v, %v; want 0x8F", sa, err)
	}
	sub.expectNone(100 * time.Millisecond)
	if h := s.Broker().Stats().LimitHits; h["topic_length"] != 4 || h["topic_levels"] != 1 {
		t.Fatalf("limit hits %v, want topic_length 4 and topic_levels 1", h)
	}
}

// A session past its subscription cap is refused the new filter (0x97),
// and may still replace one it has.
func TestSubscriptionLimit(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxSubscriptions = 2 })
	c := connect5(t, s.Addr, "sl", true, 0)
	c.sub("sl/1", 1)
	c.sub("sl/2", 1)
	sa, err := c.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "sl/3", QoS: 1}}})
	if sa == nil || sa.Reasons[0] != byte(packet.QuotaExceeded) { // paho reports the refusal as err too
		t.Fatalf("third subscription: %+v, %v; want 0x97", sa, err)
	}
	c.sub("sl/2", 2) // a replacement is not a new subscription
	if n := s.Broker().Stats().LimitHits["subscriptions"]; n != 1 {
		t.Fatalf("subscription limit hits %d, want 1", n)
	}
}

// One QoS 2 PUBLISH more than the receive maximum, with a megabyte behind
// it: the client's writes meet no connection reset and it reads
// DISCONNECT 0x93, then the end of the stream.
func TestDisconnectReasonReachesSendingClient(t *testing.T) {
	const recvMax = 4
	s := startBroker(t, func(o *mqtt.Options) { o.ReceiveMaximum = recvMax })
	r, _ := connectRaw(t, s.Addr, connect5Packet("rm-over", true, 0))
	var burst []byte
	for i := range recvMax + 1 {
		p := &packet.Publish{QoS: packet.QoS2, PacketID: uint16(i + 1), Topic: "rm/t", Payload: []byte("x")}
		burst, _ = p.Append(burst, packet.V5)
	}
	// Far more than the broker's read buffer: unread input when it closes.
	filler := &packet.Publish{QoS: packet.QoS0, Topic: "rm/t", Payload: make([]byte, 16<<10)}
	for range 64 {
		burst, _ = filler.Append(burst, packet.V5)
	}
	// Read only once the writing is over, as a client busy sending does:
	// by then a reset would have discarded the DISCONNECT.
	// A client that meets a reset on its write gives up before reading
	// anything (paho does): the broker must take the whole burst.
	wrote := make(chan error, 1)
	go func() { _, err := r.Conn().Write(burst); wrote <- err }()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("writing behind the overflow: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the broker neither read nor closed")
	}
	time.Sleep(100 * time.Millisecond)
	if !r.Closed(wait) {
		t.Fatal("the broker did not close the connection")
	}
	got := -1
	for _, p := range r.Drain() {
		if d, ok := p.(*packet.Disconnect); ok {
			got = int(d.ReasonCode)
		}
	}
	if got == -1 {
		t.Fatalf("connection ended without a DISCONNECT: %v", r.Err())
	}
	if err := r.Err(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the DISCONNECT: %v, want the end of the stream (a reset loses the reason on many stacks)", err)
	}
	if got != int(packet.ReceiveMaximumExceeded) {
		t.Fatalf("DISCONNECT reason %#x, want 0x93", got)
	}
}

// --session-expiry bounds a 3.1.1 persistent session, which cannot ask for
// an expiry, and caps a 5.0 client that asks for never.
func TestSessionExpiryOption(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.SessionExpiry = time.Second })
	c3 := connect3(t, s.Addr, "se3", false)
	c3.sub("se/t", 1)
	c3.close()
	c5 := connect5(t, s.Addr, "se5", false, 0xFFFFFFFF)
	if c5.ack.Properties == nil || c5.ack.Properties.SessionExpiryInterval == nil || *c5.ack.Properties.SessionExpiryInterval != 1 {
		t.Fatalf("CONNACK session expiry %+v, want 1", c5.ack.Properties)
	}
	c5.close()
	deadline := time.Now().Add(wait)
	for {
		on, off, err := s.Broker().SessionCounts(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if on == 0 && off == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions still stored after their expiry: %d online, %d offline", on, off)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c3, _, err := dial3(t, s.Addr, "se3", false, nil)
	if err != nil || c3.present {
		t.Fatalf("3.1.1 session after its expiry: present %v, %v", c3 != nil && c3.present, err)
	}
}

// A connection past Options.MaxPublishRate is held back, not refused or
// disconnected: every message of a burst five times the rate arrives, in
// order, and the holds are counted.
func TestPublishRateLimit(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxPublishRate = 20 })
	sub := connect3(t, s.Addr, "pr-sub", true)
	sub.sub("pr/#", 1)
	pub := connect3(t, s.Addr, "pr-pub", true)
	const n = 100
	toks := make([]paho3.Token, n)
	for i := range toks {
		toks[i] = pub.Publish("pr/t", 1, false, strconv.Itoa(i))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(wait) || tok.Error() != nil {
			t.Fatalf("publish %d: %v", i, tok.Error())
		}
	}
	for i, m := range sub.expect(n) {
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("message %d is %q", i, m.Payload())
		}
	}
	if !pub.IsConnectionOpen() {
		t.Fatal("the publisher was disconnected")
	}
	// The first second's worth passes at once; most of the rest waits.
	if hits := s.Broker().Stats().LimitHits["publish_rate"]; hits < n/2 {
		t.Fatalf("publish rate limit hits %d, want at least %d of %d over the rate", hits, n/2, n-20)
	}
}

// Past Options.MaxRetained a retained PUBLISH to a new topic is delivered
// but not retained; replacing and deleting retained messages still work,
// and a delete makes room.
func TestRetainedLimit(t *testing.T) {
	var logs logText
	s := startBroker(t, func(o *mqtt.Options) { o.MaxRetained, o.Logger = 2, logs.logger() })
	live := connect3(t, s.Addr, "rl-live", true)
	live.sub("rl/#", 1)
	pub := connect3(t, s.Addr, "rl-pub", true)
	pub.pub("rl/1", 1, true, "one")
	pub.pub("rl/2", 1, true, "two")
	pub.pub("rl/3", 0, true, "three") // over the limit: published, not retained
	pub.pub("rl/4", 1, true, "four")  // and at QoS 1
	pub.pub("rl/1", 1, true, "one again")
	live.expect(5)
	if n := s.Broker().Stats().LimitHits["retained"]; n != 2 {
		t.Fatalf("retained limit hits %d, want 2", n)
	}
	if n := logs.count("retain failed"); n > 0 {
		t.Fatalf("a retained message the limit left out was logged as failed %d times", n)
	}
	retained := func(want ...string) {
		t.Helper()
		c := connect3(t, s.Addr, "rl-late", true)
		c.sub("rl/#", 1)
		var got []string
		for _, m := range c.expect(len(want)) {
			got = append(got, m.Topic()+"="+string(m.Payload()))
		}
		c.expectNone(200 * time.Millisecond)
		c.close()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("retained %q, want %q", got, want)
		}
	}
	retained("rl/1=one again", "rl/2=two")
	pub.pub("rl/2", 1, true, "") // a delete makes room
	pub.pub("rl/4", 1, true, "four")
	retained("rl/1=one again", "rl/4=four")
}

// The in-flight gauge counts deliveries waiting for their acknowledgement
// and gives back those still waiting when the connection ends.
func TestInflightGaugeReturnsToZero(t *testing.T) {
	s := startBroker(t)
	sub, _, err := dial3(t, s.Addr, "ig-sub", false, func(o *paho3.ClientOptions) { o.SetAutoAckDisabled(true) })
	if err != nil {
		t.Fatal(err)
	}
	sub.sub("ig/#", 1)
	pub := connect3(t, s.Addr, "ig-pub", true)
	for i := range 5 {
		pub.pub("ig/t", 1, false, strconv.Itoa(i))
	}
	sub.expect(5) // never acknowledged
	if n := s.Broker().Stats().InflightOut; n != 5 {
		t.Fatalf("in flight with 5 unacknowledged deliveries: %d", n)
	}
	sub.close()
	deadline := time.Now().Add(wait)
	for s.Broker().Stats().InflightOut != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("in flight after the subscriber left: %d, want 0", s.Broker().Stats().InflightOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The session resumes: the five are sent again and counted again.
	sub2, _, err := dial3(t, s.Addr, "ig-sub", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub2.expect(5)
	for s.Broker().Stats().InflightOut != 0 {
		if time.Now().After(deadline.Add(wait)) {
			t.Fatalf("in flight after the resumed session acknowledged: %d", s.Broker().Stats().InflightOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The largest packet the broker may be configured to take stores on every
// engine whatever it carries: a retained QoS 2 PUBLISH of exactly
// MaxPacketSizeLimit bytes from a client id and on a topic of 65,000 bytes
// each (the stored forms repeat both) is staged, released, retained and
// delivered, a CONNECT of that size keeps its will in the session record
// and publishes it, and a limit above it is refused.
func TestLargestPacketEveryEngine(t *testing.T) {
	for _, name := range engine.Drivers() {
		t.Run(name, func(t *testing.T) {
			s := mqtttest.Start(t, name, nil, mqtt.Options{MaxPacketSize: mqtt.MaxPacketSizeLimit})
			if _, err := mqtt.New(s.DB(), mqtt.Options{MaxPacketSize: mqtt.MaxPacketSizeLimit + 1}); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("MaxPacketSize above the limit: %v, want ErrInvalidOption", err)
			}
			sub := connect5(t, s.Addr, "lp-sub", true, 0)
			sub.sub("lp/#", 2)
			topic := longTopic("lp/", 65000)
			pub, _ := connectRaw(t, s.Addr, connect5Packet(longTopic("lp-pub-", 65000), true, 0))
			p := &packet.Publish{Topic: topic, QoS: 2, PacketID: 1, Retain: true}
			for {
				enc, err := p.Append(nil, packet.V5)
				if err != nil {
					t.Fatal(err)
				}
				if len(enc) == mqtt.MaxPacketSizeLimit {
					break
				}
				p.Payload = make([]byte, len(p.Payload)+mqtt.MaxPacketSizeLimit-len(enc))
			}
			for i := range p.Payload {
				p.Payload[i] = byte(i)
			}
			pub.Send(p)
			if rec := pub.Expect(packet.TypePubrec, 1).(*packet.Pubrec); rec.ReasonCode != 0 {
				t.Fatalf("PUBREC %#x", rec.ReasonCode)
			}
			pub.Send(&packet.Pubrel{PacketID: 1})
			if comp := pub.Expect(packet.TypePubcomp, 1).(*packet.Pubcomp); comp.ReasonCode != 0 {
				t.Fatalf("PUBCOMP %#x", comp.ReasonCode)
			}
			if m := sub.expect(1)[0]; m.Topic != topic || !slices.Equal(m.Payload, p.Payload) {
				t.Fatalf("delivered %d bytes on a %d-byte topic, want %d on %d", len(m.Payload), len(m.Topic), len(p.Payload), len(topic))
			}
			late := connect5(t, s.Addr, "lp-late", true, 0)
			late.sub("lp/#", 1)
			if m := late.expect(1)[0]; !m.Retain || !slices.Equal(m.Payload, p.Payload) {
				t.Fatalf("retained copy: retain %v, %d bytes", m.Retain, len(m.Payload))
			}

			// A CONNECT of the limit: its will goes into the session
			// record, and out when the connection drops.
			cp := connect5Packet(longTopic("lp-will-", 65000), false, 60)
			// A will payload is at most 64 KiB: its user properties fill
			// the rest.
			cp.Will = &packet.Will{Topic: longTopic("lp/will/", 65000), QoS: 1, Payload: make([]byte, 65000)}
			for {
				enc, err := cp.Append(nil, packet.V5)
				if err != nil {
					t.Fatal(err)
				}
				// A property of n value bytes takes n+6.
				u := cp.Will.Properties.User
				switch short := mqtt.MaxPacketSizeLimit - len(enc); {
				case short == 0:
				case short < 7:
					u[len(u)-1].Value = u[len(u)-1].Value[7:]
					continue
				default:
					cp.Will.Properties.User = append(u, packet.UserProperty{Key: "k", Value: strings.Repeat("v", min(short-6, 60000))})
					continue
				}
				break
			}
			w, ack := connectRaw(t, s.Addr, cp)
			if ack.ReasonCode != 0 {
				t.Fatalf("CONNACK %#x", ack.ReasonCode)
			}
			w.Drop()
			if m := sub.expect(1)[0]; m.Topic != cp.Will.Topic || len(m.Payload) != len(cp.Will.Payload) {
				t.Fatalf("will: %d bytes on a %d-byte topic, want %d", len(m.Payload), len(m.Topic), len(cp.Will.Payload))
			}
		})
	}
}

// Every retained message a SUBSCRIBE matches is delivered, however many
// and however small the client's window: 3,000 retained QoS 1 messages to
// a 5.0 client with a receive maximum of 10 all arrive, none counted as
// dropped. They used to go through the bounded queue of live in-memory
// deliveries, which dropped all but about 1,000 of them, whatever the
// window.
func TestRetainedAllDeliveredPastTheQueue(t *testing.T) {
	s := startBroker(t)
	const n = 3000
	for i := range n {
		m := mqtt.Message{Topic: "rq/" + strconv.Itoa(i), Payload: []byte(strconv.Itoa(i)), QoS: 1, Retain: true}
		if err := s.Broker().Publish(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
	sub := subscribeRaw5(t, s.Addr, "rq-sub", 10, "rq/#")
	got := map[string]bool{}
	for len(got) < n {
		p := sub.ReadPublish()
		if !p.Retain || string(p.Payload) != strings.TrimPrefix(p.Topic, "rq/") {
			t.Fatalf("retained %q: %q, retain %v", p.Topic, p.Payload, p.Retain)
		}
		got[p.Topic] = true
		sub.Send(&packet.Puback{PacketID: p.PacketID})
	}
	if d := s.Broker().Stats().Dropped["slow"]; d != 0 {
		t.Fatalf("%d deliveries dropped as slow", d)
	}
}
