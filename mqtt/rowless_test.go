package mqtt_test

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// A session left offline with no QoS 2 state says so in its record, and
// its reconnect reads none; one that leaves QoS 2 state, inbound or
// outbound, does not, and its reconnect resumes that state.
func TestRowlessSession(t *testing.T) {
	s := startBroker(t)
	b := s.Broker()
	rowless := func(client string, want bool) {
		t.Helper()
		if got := storedSession(t, s.DB(), client).Rowless; got != want {
			t.Fatalf("%s: rowless %v, want %v", client, got, want)
		}
	}
	// leave drops r's connection and waits for the broker to let go of it.
	leave := func(r *rawClient, clean bool) {
		t.Helper()
		online := b.Stats().ConnectionsOnline
		if clean {
			r.Disconnect()
		} else {
			r.Drop()
		}
		waitFor(t, "the connection to end", func() bool { return b.Stats().ConnectionsOnline < online })
	}
	subCP := connect5Packet("rl-sub", false, 3600)
	sub, _ := connectRaw(t, s.Addr, subCP)
	sub.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "rl/t", QoS: 2}}})
	sub.Expect(packet.TypeSuback, 1)
	leave(sub, true)
	rowless("rl-sub", true)

	// An outbound QoS 2 exchange left at its PUBREL: a row, which the
	// next connection resumes (a PUBREL, not the PUBLISH again).
	pub := connect5(t, s.Addr, "rl-pub", true, 0)
	pub.pub("rl/t", 2, false, "m1")
	sub, ack := connectRaw(t, s.Addr, subCP)
	if !ack.SessionPresent {
		t.Fatal("rl-sub: no session present")
	}
	p := sub.ReadPublish()
	if string(p.Payload) != "m1" || p.QoS != 2 {
		t.Fatalf("rl-sub: got %q at QoS %d, want m1 at 2", p.Payload, p.QoS)
	}
	sub.Send(&packet.Pubrec{PacketID: p.PacketID})
	sub.Expect(packet.TypePubrel, p.PacketID)
	leave(sub, false)
	rowless("rl-sub", false)
	// What is owed now is a PUBREL: the record keeps the message without
	// its payload.
	if m := storedOut(t, s.DB(), "rl-sub", p.PacketID); m.Topic != "rl/t" || len(m.Payload) != 0 {
		t.Fatalf("rl-sub: record after PUBREC holds topic %q and a %d-byte payload, want rl/t and none", m.Topic, len(m.Payload))
	}
	sub, _ = connectRaw(t, s.Addr, subCP)
	sub.Expect(packet.TypePubrel, p.PacketID)
	sub.Send(&packet.Pubcomp{PacketID: p.PacketID})
	sub.Silence(200 * time.Millisecond)
	leave(sub, true)
	// That connection began with the exchange's row, and left its
	// completion mark behind; a later one, finding no row left, says so
	// when it leaves.
	rowless("rl-sub", false)
	for i := 0; !storedSession(t, s.DB(), "rl-sub").Rowless; i++ {
		if i == 3 {
			t.Fatal("rl-sub: still not rowless after 3 connections with no QoS 2 traffic")
		}
		sub, _ = connectRaw(t, s.Addr, subCP)
		leave(sub, true)
	}

	// An inbound QoS 2 message staged and not released: a row, which the
	// next connection's PUBREL releases.
	inCP := connect5Packet("rl-in", false, 3600)
	in, _ := connectRaw(t, s.Addr, inCP)
	leave(in, true)
	rowless("rl-in", true)
	in, _ = connectRaw(t, s.Addr, inCP)
	in.Send(&packet.Publish{Topic: "rl/t", QoS: 2, PacketID: 7, Payload: []byte("m2")})
	in.Expect(packet.TypePubrec, 7)
	leave(in, false)
	rowless("rl-in", false)
	if n := storedSession(t, s.DB(), "rl-in").StagedQoS2; n != 1 {
		t.Fatalf("rl-in: %d staged messages, want 1", n)
	}
	in, _ = connectRaw(t, s.Addr, inCP)
	in.Send(&packet.Pubrel{PacketID: 7})
	if c, ok := in.Read("PUBCOMP").(*packet.Pubcomp); !ok || c.ReasonCode != 0 {
		t.Fatalf("rl-in: PUBCOMP %+v", c)
	}
	sub, _ = connectRaw(t, s.Addr, subCP)
	p = sub.ReadPublish()
	if string(p.Payload) != "m2" {
		t.Fatalf("rl-sub: got %q, want m2", p.Payload)
	}
}

// A reconnect of a session with no rows skips reading them; the result
// is the same session, subscriptions and checkpoint included, on every
// engine (see TestRowlessSession for what a session with rows resumes).
func TestRowlessSessionResumes(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("rlr", false, 3600)
	r, _ := connectRaw(t, s.Addr, cp)
	r.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "rlr/#", QoS: 1}}})
	r.Expect(packet.TypeSuback, 1)
	r.Disconnect()
	waitFor(t, "rlr offline", func() bool { return !storedSession(t, s.DB(), "rlr").Online })
	pub := connect5(t, s.Addr, "rlr-pub", true, 0)
	for _, m := range []string{"a", "b", "c"} {
		pub.pub("rlr/x", 1, false, m)
	}
	restart(t, s)
	if !storedSession(t, s.DB(), "rlr").Rowless {
		t.Fatal("rlr: not rowless after a clean disconnect with no QoS 2 state")
	}
	r, ack := connectRaw(t, s.Addr, cp)
	if !ack.SessionPresent {
		t.Fatal("rlr: no session present")
	}
	for _, want := range []string{"a", "b", "c"} {
		p := r.ReadPublish()
		if string(p.Payload) != want {
			t.Fatalf("rlr: got %q, want %q", p.Payload, want)
		}
		r.Send(&packet.Puback{PacketID: p.PacketID})
	}
	r.Silence(200 * time.Millisecond)
}

// storedOut returns the message of client's stored outbound QoS 2 record
// for packet id pi.
func storedOut(t *testing.T, db *table.DB, client string, pi uint16) message.Message {
	t.Helper()
	r, err := db.Get(ctxT(t), session.OutTable, session.SlotID(client, pi))
	if err != nil {
		t.Fatalf("%s: outbound record %d: %v", client, pi, err)
	}
	var or session.OutRecord
	if err := or.Decode(r.Value); err != nil {
		t.Fatal(err)
	}
	var m message.Message
	if err := m.UnmarshalBinary(or.Msg); err != nil {
		t.Fatal(err)
	}
	return m
}
