package mqtt_test

// Exchanges no client library will produce: malformed and out-of-order
// packets, several subscription identifiers on one message, inbound topic
// aliases. They go over a raw TCP client using the packet codec (or hand-
// written bytes), next to a paho client that must keep working.

import (
	"io"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// str encodes an MQTT UTF-8 string (length-prefixed bytes).
func str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// frame builds a packet from its first byte and body.
func frame(first byte, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	out := []byte{first}
	n := len(b)
	for {
		d := byte(n % 128)
		n /= 128
		if n > 0 {
			d |= 0x80
		}
		out = append(out, d)
		if n == 0 {
			break
		}
	}
	return append(out, b...)
}

// Malformed and out-of-order packets end that one connection, with the
// reason code the spec gives in 5.0 (no packet at all before CONNECT, and
// no DISCONNECT in 3.1.1); another client keeps working throughout.
func TestMalformedPackets(t *testing.T) {
	s := startBroker(t)
	bystander := connect5(t, s.Addr, "bystander", true, 0)
	bystander.sub("alive", 1)
	beat := 0
	alive := func(t *testing.T) {
		t.Helper()
		beat++
		payload := string(rune('a' + beat%26))
		bystander.pub("alive", 1, false, payload)
		bystander.expectOne("alive", payload)
	}

	none := -1
	cases := []struct {
		name    string
		connect bool // send a valid 5.0 CONNECT first
		v311    bool
		bytes   []byte
		pkt     packet.Packet
		want    int
	}{
		// Before CONNECT nothing is answered: the first packet must be a
		// CONNECT [MQTT-3.1.0-1].
		{name: "garbage before CONNECT", bytes: []byte{0xff, 0xff, 0xff, 0xff, 0x00, 0x01}, want: none},
		{name: "PUBLISH before CONNECT", bytes: frame(0x30, str("a/b"), []byte("x")), want: none},
		{name: "PINGREQ before CONNECT", bytes: []byte{0xc0, 0x00}, want: none},
		// After CONNECT.
		{name: "reserved packet type 0", connect: true, bytes: []byte{0x00, 0x00}, want: int(packet.MalformedPacket)},
		{name: "remaining length over 4 bytes", connect: true, bytes: []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, want: int(packet.MalformedPacket)},
		{name: "SUBSCRIBE reserved flags 0", connect: true, bytes: frame(0x80, []byte{0, 1, 0}, str("a"), []byte{1}), want: int(packet.MalformedPacket)},
		{name: "PUBREL reserved flags 0", connect: true, bytes: frame(0x60, []byte{0, 1}), want: int(packet.MalformedPacket)},
		{name: "PUBLISH QoS 3", connect: true, bytes: frame(0x36, str("a"), []byte{0, 1, 0}), want: int(packet.MalformedPacket)},
		{name: "PINGREQ with flags", connect: true, bytes: []byte{0xc1, 0x00}, want: int(packet.MalformedPacket)},
		{name: "invalid UTF-8 topic", connect: true, bytes: frame(0x30, []byte{0, 2, 0xc3, 0x28}, []byte{0}), want: int(packet.MalformedPacket)},
		{name: "U+0000 in topic", connect: true, bytes: frame(0x30, []byte{0, 3, 'a', 0, 'b'}, []byte{0}), want: int(packet.MalformedPacket)},
		{name: "truncated body", connect: true, bytes: frame(0x82, []byte{0, 1, 0, 0, 9, 'a'}), want: int(packet.MalformedPacket)},
		{name: "SUBSCRIBE with no filter", connect: true, bytes: frame(0x82, []byte{0, 1, 0}), want: int(packet.ProtocolError)},
		// A filter breaking the wildcard rules is well-formed UTF-8 data
		// that does not conform: a protocol error [MQTT-4.7.1-1]
		// [MQTT-4.7.1-2] [MQTT-4.8.2-1].
		{name: "misplaced # in a filter", connect: true, bytes: frame(0x82, []byte{0, 1, 0}, str("a/#/b"), []byte{1}), want: int(packet.ProtocolError)},
		{name: "empty share name", connect: true, bytes: frame(0x82, []byte{0, 1, 0}, str("$share//a"), []byte{1}), want: int(packet.ProtocolError)},
		// Payload format 1 promises UTF-8 [MQTT-3.3.2-4 receiver side].
		{name: "payload format 1 with invalid UTF-8", connect: true, bytes: frame(0x30, str("a"), []byte{2, 0x01, 0x01}, []byte{0xff, 0xfe}), want: int(packet.PayloadFormatInvalid)},
		{name: "second CONNECT", connect: true, pkt: connect5Packet("bad-2nd", true, 0), want: int(packet.ProtocolError)},
		// A wildcard makes the topic name ill-formed, not merely refused, so
		// a protocol error rather than 0x90 [MQTT-3.3.2-2].
		{name: "wildcard in topic name", connect: true, bytes: frame(0x30, str("a/+"), []byte{0}), want: int(packet.ProtocolError)},
		{name: "topic alias 0", connect: true, bytes: frame(0x30, str("a"), []byte{3, 0x23, 0, 0}), want: int(packet.TopicAliasInvalid)},
		{name: "topic alias over maximum", connect: true, pkt: func() packet.Packet {
			p := &packet.Publish{Topic: "a", Payload: []byte("x")}
			p.Properties.SetTopicAlias(60000)
			return p
		}(), want: int(packet.TopicAliasInvalid)},
		{name: "unknown topic alias", connect: true, pkt: func() packet.Packet {
			p := &packet.Publish{Payload: []byte("x")}
			p.Properties.SetTopicAlias(5)
			return p
		}(), want: int(packet.ProtocolError)},
		{name: "no local on a shared subscription", connect: true, pkt: &packet.Subscribe{PacketID: 1,
			Subscriptions: []packet.Subscription{{Filter: "$share/g/a", QoS: 1, NoLocal: true}}}, want: int(packet.ProtocolError)},
		{name: "session expiry set on DISCONNECT after 0", connect: true, pkt: func() packet.Packet {
			d := &packet.Disconnect{}
			d.Properties.SetSessionExpiry(60)
			return d
		}(), want: int(packet.ProtocolError)},
		{name: "CONNACK from a client", connect: true, bytes: []byte{0x20, 0x03, 0x00, 0x00, 0x00}, want: int(packet.ProtocolError)},
		// 3.1.1 has no DISCONNECT from the server: the connection closes.
		{name: "3.1.1 garbage after CONNECT", connect: true, v311: true, bytes: []byte{0x00, 0x00}, want: none},
		{name: "3.1.1 second CONNECT", connect: true, v311: true, pkt: &packet.Connect{Version: packet.V311, ClientID: "x", CleanStart: true}, want: none},
		{name: "3.1.1 misplaced # in a filter", connect: true, v311: true, bytes: frame(0x82, []byte{0, 1}, str("a/#/b"), []byte{1}), want: none},
		{name: "3.1.1 SUBSCRIBE reserved flags", connect: true, v311: true, bytes: frame(0x80, []byte{0, 1}, str("a"), []byte{1}), want: none},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, s.Addr, packet.V5)
			if tc.connect {
				cp := connect5Packet("bad", true, 0)
				if tc.v311 {
					cp = &packet.Connect{Version: packet.V311, ClientID: "bad", CleanStart: true, KeepAlive: 30}
				}
				r.Send(cp)
				if ack, ok := r.Read("packet").(*packet.Connack); !ok || ack.ReasonCode != 0 {
					t.Fatalf("CONNACK %+v", ack)
				}
			}
			if tc.bytes != nil {
				r.SendBytes(tc.bytes)
			} else {
				r.Send(tc.pkt)
			}
			if got := r.ExpectClose(); got != tc.want {
				t.Fatalf("closed with DISCONNECT %#x, want %#x", got, tc.want)
			}
			alive(t)
		})
	}
}

// CONNECT refusals: an unsupported protocol level gets 0x01 in a 3.1.1
// CONNACK [MQTT-3.1.2-2]; a 3.1.1 empty client id without clean session
// gets 0x02 [MQTT-3.1.3-8]; a malformed CONNECT flag byte closes
// [MQTT-3.1.2-3].
func TestConnectRefusals(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	// The 3.1.1 CONNACK on the wire: 0x20 0x02, flags, return code.
	wantConnack := func(r *rawClient, code byte) {
		t.Helper()
		_ = r.Conn().SetReadDeadline(time.Now().Add(wait))
		got := make([]byte, 4)
		if _, err := io.ReadFull(r.Conn(), got); err != nil {
			t.Fatalf("no CONNACK: %v", err)
		}
		if want := []byte{0x20, 0x02, 0x00, code}; !slices.Equal(got, want) {
			t.Fatalf("CONNACK bytes % x, want % x", got, want)
		}
		_ = r.Conn().SetReadDeadline(time.Time{}) // the client's reader takes over
		r.ExpectClose()
	}
	t.Run("protocol level 6", func(t *testing.T) {
		r := dialRaw(t, s.Addr, packet.V5)
		r.SendBytes(frame(0x10, str("MQTT"), []byte{6, 0x02, 0, 30}, str("x")))
		wantConnack(r, 0x01)
	})
	t.Run("3.1.1 empty id, persistent", func(t *testing.T) {
		r := dialRaw(t, s.Addr, packet.V311)
		r.SendBytes(frame(0x10, str("MQTT"), []byte{4, 0x00, 0, 30}, str("")))
		wantConnack(r, 0x02)
	})
	t.Run("3.1.1 empty id, clean", func(t *testing.T) {
		r := dialRaw(t, s.Addr, packet.V311)
		r.SendBytes(frame(0x10, str("MQTT"), []byte{4, 0x02, 0, 30}, str("")))
		if ack, ok := r.Read("packet").(*packet.Connack); !ok || ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %+v, want accepted [MQTT-3.1.3-7]", ack)
		}
	})
	t.Run("reserved connect flag", func(t *testing.T) {
		r := dialRaw(t, s.Addr, packet.V5)
		r.SendBytes(frame(0x10, str("MQTT"), []byte{5, 0x03, 0, 30, 0}, str("x")))
		if p, ok := r.Next(wait); ok {
			if ack, ok := p.(*packet.Connack); !ok || ack.ReasonCode != packet.MalformedPacket {
				t.Fatalf("got %+v, want a close or CONNACK 0x81", p)
			}
		}
		r.ExpectClose()
	})
	t.Run("no CONNECT in time", func(t *testing.T) {
		// A connection that sends nothing is closed, not held forever.
		r := dialRaw(t, s.Addr, packet.V5)
		_ = r.Conn().SetReadDeadline(time.Now().Add(15 * time.Second))
		buf := make([]byte, 1)
		if _, err := r.Conn().Read(buf); err == nil {
			t.Fatal("broker sent bytes to a silent connection")
		}
	})
}

// One message matching several subscriptions of a session is delivered
// once, at the highest QoS granted, with every matching subscription
// identifier; a subscription updated without an identifier loses it
// [MQTT-3.3.4-2] [MQTT-3.3.4-3] [MQTT-3.3.4-4] [MQTT-3.3.4-5]
// [MQTT-3.8.4-3].
func TestOverlappingSubscriptionIdentifiers5(t *testing.T) {
	s := startBroker(t)
	r, _ := connectRaw(t, s.Addr, connect5Packet("ov", true, 0))
	subscribe := func(pi uint16, id uint32, filter string, qos packet.QoS) {
		t.Helper()
		sp := &packet.Subscribe{PacketID: pi, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}}
		if id != 0 {
			sp.Properties.AddSubscriptionID(id)
		}
		r.Send(sp)
		if ack, ok := r.Read("packet").(*packet.Suback); !ok || ack.ReasonCodes[0] != packet.ReasonCode(qos) {
			t.Fatalf("SUBACK %+v", ack)
		}
	}
	subscribe(1, 7, "ov/+", 1)
	subscribe(2, 9, "ov/#", 2)
	subscribe(3, 0, "ov/x", 0)
	pub := connect5(t, s.Addr, "ov-pub", true, 0)

	recv := func(wantQoS packet.QoS, wantIDs []uint32) {
		t.Helper()
		p := r.ReadPublish()
		if p.QoS != wantQoS {
			t.Errorf("delivered at QoS %d, want %d", p.QoS, wantQoS)
		}
		ids := slices.Clone(p.Properties.SubscriptionIDs)
		slices.Sort(ids)
		if !slices.Equal(ids, wantIDs) {
			t.Errorf("subscription ids %v, want %v", ids, wantIDs)
		}
		switch p.QoS {
		case 1:
			r.Send(&packet.Puback{PacketID: p.PacketID})
		case 2:
			r.Send(&packet.Pubrec{PacketID: p.PacketID})
			if rel, ok := r.Read("packet").(*packet.Pubrel); !ok || rel.PacketID != p.PacketID {
				t.Fatalf("no PUBREL")
			}
			r.Send(&packet.Pubcomp{PacketID: p.PacketID})
		}
		r.Silence(200 * time.Millisecond)
	}
	for q := byte(0); q < 3; q++ {
		pub.pub("ov/x", q, false, "m")
		recv(packet.QoS(q), []uint32{7, 9})
	}
	pub.pub("ov/x/y", 2, false, "deep")
	recv(2, []uint32{9})
	subscribe(4, 0, "ov/#", 2) // replaced: the identifier goes
	pub.pub("ov/x/y", 1, false, "deep")
	recv(1, nil)
}

// Inbound topic aliases: a PUBLISH with a topic and an alias sets the
// mapping, one with an empty topic uses it, and a new topic remaps it
// [MQTT-3.3.2-12]; aliases belong to one connection [MQTT-3.3.2-10].
func TestTopicAliasInbound5(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "ta-sub", true, 0)
	sub.sub("ta/#", 2)
	r, ack := connectRaw(t, s.Addr, connect5Packet("ta", true, 0))
	if ack.Properties.TopicAliasMaximum == 0 {
		t.Fatal("no topic alias maximum in CONNACK")
	}
	send := func(topic string, alias uint16, qos packet.QoS, payload string) {
		t.Helper()
		p := &packet.Publish{Topic: topic, QoS: qos, PacketID: uint16(len(payload) + 1), Payload: []byte(payload)}
		p.Properties.SetTopicAlias(alias)
		r.Send(p)
		switch qos {
		case 1:
			if _, ok := r.Read("packet").(*packet.Puback); !ok {
				t.Fatal("no PUBACK")
			}
		case 2:
			if _, ok := r.Read("packet").(*packet.Pubrec); !ok {
				t.Fatal("no PUBREC")
			}
			r.Send(&packet.Pubrel{PacketID: p.PacketID})
			if _, ok := r.Read("packet").(*packet.Pubcomp); !ok {
				t.Fatal("no PUBCOMP")
			}
		}
	}
	send("ta/x", 1, 0, "a")
	sub.expectOne("ta/x", "a")
	send("", 1, 1, "bb")
	if m := sub.expectOne("ta/x", "bb"); m.Properties != nil && m.Properties.TopicAlias != nil {
		t.Fatal("inbound alias forwarded to the subscriber")
	}
	send("ta/y", 1, 2, "ccc")
	sub.expectOne("ta/y", "ccc")
	send("", 1, 2, "dddd")
	sub.expectOne("ta/y", "dddd")

	// A new connection starts with no aliases.
	r.Send(&packet.Disconnect{})
	r, _ = connectRaw(t, s.Addr, connect5Packet("ta", true, 0))
	p := &packet.Publish{Payload: []byte("x")}
	p.Properties.SetTopicAlias(1)
	r.Send(p)
	if rc := r.ExpectClose(); rc != int(packet.ProtocolError) {
		t.Fatalf("alias from an earlier connection: DISCONNECT %#x, want 0x82", rc)
	}
}

// A QoS 2 PUBLISH re-sent before PUBREL is delivered once; PUBREL for an
// unknown id gets PUBCOMP 0x92 [MQTT-4.3.3-9] [MQTT-4.3.3-10].
func TestQoS2ExactlyOnceInbound5(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "eo-sub", true, 0)
	sub.sub("eo", 2)
	r, _ := connectRaw(t, s.Addr, connect5Packet("eo", true, 0))
	p := &packet.Publish{Topic: "eo", QoS: 2, PacketID: 42, Payload: []byte("once")}
	r.Send(p)
	if _, ok := r.Read("packet").(*packet.Pubrec); !ok {
		t.Fatal("no PUBREC")
	}
	sub.expectNone(200 * time.Millisecond) // not before PUBREL
	r.Send(&packet.Publish{Topic: "eo", QoS: 2, PacketID: 42, Dup: true, Payload: []byte("once")})
	if _, ok := r.Read("packet").(*packet.Pubrec); !ok {
		t.Fatal("no PUBREC for the duplicate")
	}
	r.Send(&packet.Pubrel{PacketID: 42})
	if c, ok := r.Read("packet").(*packet.Pubcomp); !ok || c.ReasonCode != 0 {
		t.Fatalf("PUBCOMP %+v", c)
	}
	r.Send(&packet.Pubrel{PacketID: 42})
	if _, ok := r.Read("packet").(*packet.Pubcomp); !ok {
		t.Fatal("no PUBCOMP for the repeated PUBREL")
	}
	sub.expectOne("eo", "once")
	sub.expectNone(300 * time.Millisecond)
	r.Send(&packet.Pubrel{PacketID: 77})
	if c, ok := r.Read("packet").(*packet.Pubcomp); !ok || c.ReasonCode != packet.PacketIdentifierNotFound {
		t.Fatalf("PUBCOMP for an unknown id %+v, want 0x92", c)
	}
}

// A QoS 2 delivery to a shared subscription that the connection loss
// interrupts is completed when the member reconnects: the PUBLISH again
// (DUP, same id) before PUBREC, the PUBREL after it [MQTT-4.8.2-3]; so is
// a QoS 2 retained message sent on subscribe [MQTT-4.4.0-1].
func TestSharedQoS2CompletesOnReconnect5(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("sq2", false, 3600)
	r, _ := connectRaw(t, s.Addr, cp)
	r.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "$share/g/sq2", QoS: 2}}})
	if _, ok := r.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connect5(t, s.Addr, "sq2-pub", true, 0)
	pub.pub("sq2", 2, false, "one")
	first := r.ReadPublish()
	r.Conn().Close()

	r, _ = connectRaw(t, s.Addr, cp)
	again := r.ReadPublish()
	if string(again.Payload) != "one" || !again.Dup || again.PacketID != first.PacketID {
		t.Fatalf("re-sent %q dup=%v id=%d, want %q dup id %d", again.Payload, again.Dup, again.PacketID, "one", first.PacketID)
	}
	r.Send(&packet.Pubrec{PacketID: again.PacketID})
	if rel, ok := r.Read("packet").(*packet.Pubrel); !ok || rel.PacketID != again.PacketID {
		t.Fatal("no PUBREL")
	}
	r.Conn().Close()

	r, _ = connectRaw(t, s.Addr, cp)
	if rel, ok := r.Read("packet").(*packet.Pubrel); !ok || rel.PacketID != again.PacketID {
		t.Fatal("PUBREL not re-sent after the reconnect")
	}
	r.Send(&packet.Pubcomp{PacketID: again.PacketID})
	r.Silence(300 * time.Millisecond)

	// A retained QoS 2 message sent on subscribe.
	pub.pub("sq2/ret", 2, true, "kept")
	r.Send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "sq2/ret", QoS: 2}}})
	var ret *packet.Publish
	for ret == nil {
		switch p := r.Read("packet").(type) {
		case *packet.Suback:
		case *packet.Publish:
			ret = p
		default:
			t.Fatalf("unexpected %v", p.Type())
		}
	}
	r.Conn().Close()
	r, _ = connectRaw(t, s.Addr, cp)
	if p := r.ReadPublish(); string(p.Payload) != "kept" || p.PacketID != ret.PacketID || !p.Dup {
		t.Fatalf("retained QoS 2 re-sent as %q id %d dup=%v, want kept id %d dup", p.Payload, p.PacketID, p.Dup, ret.PacketID)
	}
}
