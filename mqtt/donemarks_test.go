package mqtt_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// countingMarks is an engine that passes every call on, counting the
// completion marks (puts of the broker's QoS 2 completion-mark table) of
// the commits it passes in n.
type countingMarks struct {
	engine.Engine
	n *atomic.Int64
}

func (c countingMarks) Submit(ctx context.Context, b *engine.Batch) (*engine.Handle, error) {
	for _, op := range b.Ops {
		if op.Kind == engine.OpPut && bytes.Contains(op.Key, []byte(doneTable+"\x00")) {
			c.n.Add(1)
		}
	}
	return c.Engine.Submit(ctx, b)
}

// TestQoS2EndingMarks checks that outbound QoS 2 exchanges that complete
// in order end with their record's delete alone: the checkpoint written
// with the deletes covers them, so no completion mark is written (and
// none deleted later). Two that complete above an exchange still open do
// get marks. Either way, a session that leaves abruptly and comes back
// after a restart is sent none of the completed ones again.
func TestQoS2EndingMarks(t *testing.T) {
	var markPuts atomic.Int64
	s := mqtttest.StartWrapped(t, testEngine, func(e engine.Engine) engine.Engine { return countingMarks{e, &markPuts} }, mqtt.Options{})
	subCP := connect5Packet("dm-sub", false, 3600)
	sub, _ := connectRaw(t, s.Addr, subCP)
	sub.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "dm/t", QoS: 2}}})
	sub.Expect(packet.TypeSuback, 1)
	pub, _ := connectRaw(t, s.Addr, connect5Packet("dm-pub", true, 0))
	markPuts.Store(0)
	// Several times the endings that make a checkpoint, one exchange at
	// a time on each side.
	const n = 300
	for i := range n {
		pi := uint16(i%100 + 1)
		pub.Send(&packet.Publish{Topic: "dm/t", QoS: 2, PacketID: pi, Payload: []byte(fmt.Sprint(i))})
		pub.Expect(packet.TypePubrec, pi)
		pub.Send(&packet.Pubrel{PacketID: pi})
		pub.Expect(packet.TypePubcomp, pi)
		p := sub.ReadPublish()
		if want := fmt.Sprint(i); string(p.Payload) != want {
			t.Fatalf("delivery %d: got %q, want %q", i, p.Payload, want)
		}
		sub.Send(&packet.Pubrec{PacketID: p.PacketID})
		sub.Expect(packet.TypePubrel, p.PacketID)
		sub.Send(&packet.Pubcomp{PacketID: p.PacketID})
	}
	// The last endings go with the next checkpoint, within the broker's
	// checkpoint period.
	time.Sleep(1500 * time.Millisecond)
	if got := markPuts.Load(); got != 0 {
		t.Fatalf("%d completion marks written for %d QoS 2 deliveries completed in order, want 0", got, n)
	}
	sub.Drop()
	pub.Disconnect()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	sub, ack := connectRaw(t, s.Addr, subCP)
	if !ack.SessionPresent {
		t.Fatal("dm-sub: no session present after the restart")
	}
	sub.Silence(300 * time.Millisecond)
	pub, _ = connectRaw(t, s.Addr, connect5Packet("dm-pub", true, 0))
	pub.Send(&packet.Publish{Topic: "dm/t", QoS: 2, PacketID: 1, Payload: []byte("after")})
	pub.Expect(packet.TypePubrec, 1)
	pub.Send(&packet.Pubrel{PacketID: 1})
	pub.Expect(packet.TypePubcomp, 1)
	p := sub.ReadPublish()
	if string(p.Payload) != "after" {
		t.Fatalf("after the restart: got %q, want the new message only", p.Payload)
	}
	sub.Send(&packet.Pubrec{PacketID: p.PacketID})
	sub.Expect(packet.TypePubrel, p.PacketID)
	sub.Send(&packet.Pubcomp{PacketID: p.PacketID})

	// Out of order: the first of three is left at its PUBREL while the
	// other two complete. The checkpoint stays below the first, so the
	// other two need their marks: after an abrupt leave and a restart
	// the session is owed the first one's PUBREL and nothing else.
	var pis [3]uint16
	for i := range pis {
		pi := uint16(i + 1)
		pub.Send(&packet.Publish{Topic: "dm/t", QoS: 2, PacketID: pi, Payload: []byte(fmt.Sprint("ooo", i))})
		pub.Expect(packet.TypePubrec, pi)
		pub.Send(&packet.Pubrel{PacketID: pi})
		pub.Expect(packet.TypePubcomp, pi)
		p := sub.ReadPublish()
		pis[i] = p.PacketID
		sub.Send(&packet.Pubrec{PacketID: p.PacketID})
		sub.Expect(packet.TypePubrel, p.PacketID)
	}
	sub.Send(&packet.Pubcomp{PacketID: pis[2]}, &packet.Pubcomp{PacketID: pis[1]})
	time.Sleep(1500 * time.Millisecond) // a checkpoint takes the two endings
	if got := markPuts.Load(); got != 2 {
		t.Fatalf("%d completion marks written for two QoS 2 deliveries completed above the checkpoint, want 2", got)
	}
	sub.Drop()
	pub.Disconnect()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	sub, _ = connectRaw(t, s.Addr, subCP)
	sub.Expect(packet.TypePubrel, pis[0])
	sub.Send(&packet.Pubcomp{PacketID: pis[0]})
	sub.Silence(300 * time.Millisecond)
}
