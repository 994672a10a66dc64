package conformance

import (
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The qos2 cases with two broker nodes A and B on one store (see
// secondNode in mqtt_harness.go: on JetStream B is a second engine on A's
// server, on the embedded engines a second broker over the same
// table.DB). Both run with node ids, so a client moving from one to the
// other takes its session over across nodes.

// caseRetriedPubrelOnAnotherNode (Q08): a PUBREL retried on node B while
// node A's release of the same message is in flight. (a) A's release commit
// is held before it reaches the store; the client gives up on A and retries
// on B, which finds the message still staged and releases it (PUBCOMP
// success). A stays stuck, so B takes the session over after its takeover
// timeout; the held release, once let go, must deliver nothing. (b) A's
// release is committed but A's pipeline holds its completion, so no PUBCOMP
// comes; the retry on B finds nothing staged (PUBCOMP 0x92). Either way
// every subscriber, on either node, gets the message exactly once.
func caseRetriedPubrelOnAnotherNode(t T, tg Target) {
	fa := newBrokerFaults()
	a := startBroker(t, tg, mqtt.Options{NodeID: "A", Hooks: fa.hooks()})
	bAddr := secondNode(t, tg, a, mqtt.Options{NodeID: "B", TakeoverTimeout: 500 * time.Millisecond}).Addr
	subA := newSubscriber(t, "subA", a.Addr, "q08-subA", packet.V311, "q08/#", packet.QoS1)
	subB := newSubscriber(t, "subB", bAddr, "q08-subB", packet.V5, "q08/#", packet.QoS2)

	pub, _ := connectRaw(t, "pub@A", a.Addr, "q08-pub", packet.V5, false)
	release := fa.holdSubmits(mqtt.KindRelease)
	pub.Send(pubQoS2(1, "q08/a", "held-before-commit"), pubrel(1))
	fa.waitHeld(t, mqtt.KindRelease)
	pub.Drop()
	pub, ackp := connectRaw(t, "pub@B", bAddr, "q08-pub", packet.V5, false)
	if !ackp.SessionPresent {
		t.Fatalf("session not present on node B")
	}
	pub.Send(pubrel(1))
	if rc := mqtttest.ReasonOf(pub.Expect(packet.TypePubcomp, 1)); rc != packet.Success {
		t.Fatalf("PUBCOMP from B: reason %v, want success (B released the staged message)", rc)
	}
	release()
	subA.expectExactly("held-before-commit")
	subB.expectExactly("held-before-commit")
	pub.Silence(quiet)
	pub.Disconnect()

	pub, _ = connectRaw(t, "pub@A", a.Addr, "q08-pub", packet.V5, false)
	release = fa.holdAcks(mqtt.KindRelease)
	pub.Send(pubQoS2(2, "q08/b", "held-after-commit"), pubrel(2))
	pub.Expect(packet.TypePubrec, 2)
	subA.waitTook("held-after-commit") // committed, its PUBCOMP held
	pub.Drop()
	pub, _ = connectRaw(t, "pub@B", bAddr, "q08-pub", packet.V5, false)
	pub.Send(pubrel(2))
	if rc := mqtttest.ReasonOf(pub.Expect(packet.TypePubcomp, 2)); rc != packet.PacketIdentifierNotFound {
		t.Fatalf("PUBCOMP from B: reason %v, want 0x92 (released on A already)", rc)
	}
	release()
	pub.Silence(quiet)
	subA.expectExactly("held-before-commit", "held-after-commit")
	subB.expectExactly("held-before-commit", "held-after-commit")
}

// caseSessionTakeoverWithExchangesInFlight (Q16): client C has 20 staged and
// 10 released exchanges in flight on node A (A's pipeline holds the
// releases' completions) when a CONNECT with C's id arrives on node B. A's
// connection is closed (DISCONNECT 0x8E) before B's CONNACK; nothing of A's
// pipeline reaches B's connection; C's re-sends on B deliver every message
// exactly once.
func caseSessionTakeoverWithExchangesInFlight(t T, tg Target) {
	fa := newBrokerFaults()
	a := startBroker(t, tg, mqtt.Options{NodeID: "A", Hooks: fa.hooks()})
	bAddr := secondNode(t, tg, a, mqtt.Options{NodeID: "B"}).Addr
	subA := newSubscriber(t, "subA", a.Addr, "q16-subA", packet.V5, "q16/#", packet.QoS2)
	subB := newSubscriber(t, "subB", bAddr, "q16-subB", packet.V311, "q16/#", packet.QoS1)

	c1, _ := connectRaw(t, "C@A", a.Addr, "q16-c", packet.V5, false)
	c1.Send(burstQoS2("q16/x", "msg-", 1, 30)...)
	c1.ExpectSeq(acks(packet.TypePubrec, 1, 30)...)
	release := fa.holdAcks(mqtt.KindRelease)
	defer release()
	c1.Send(pubrels(21, 30)...)
	subA.waitTook(seqPayloads("msg-", 21, 30)...) // released, PUBCOMPs held

	c2 := dialRaw(t, "C@B", bAddr, packet.V5)
	ack := c2.Connect(mqtttest.ConnectPacket("q16-c", packet.V5, false))
	connacked := time.Now()
	if !ack.SessionPresent {
		t.Fatalf("session not present on node B")
	}
	if !c1.Closed(100 * time.Millisecond) {
		t.Fatalf("A's connection was still open when B's CONNACK arrived")
	}
	if c1.ClosedAt().After(connacked) {
		t.Fatalf("A's connection closed %v after B's CONNACK", c1.ClosedAt().Sub(connacked))
	}
	var got []string
	for _, p := range c1.Drain() {
		got = append(got, mqtttest.Describe(p))
	}
	if !slices.Equal(got, []string{mqtttest.Describe(&packet.Disconnect{ReasonCode: packet.SessionTakenOver})}) {
		t.Fatalf("A's connection got %v after the takeover, want only DISCONNECT 0x8E", got)
	}
	release()

	var resend []packet.Packet
	for _, p := range burstQoS2("q16/x", "msg-", 1, 20) {
		resend = append(resend, dupOf(p.(*packet.Publish)))
	}
	c2.Send(resend...)
	c2.ExpectSeq(acks(packet.TypePubrec, 1, 20)...)
	c2.Send(pubrels(1, 30)...)
	c2.ExpectSeq(acks(packet.TypePubcomp, 1, 30)...)
	c2.Silence(quiet)
	want := append(seqPayloads("msg-", 21, 30), seqPayloads("msg-", 1, 20)...)
	subA.expectExactly(want...)
	subB.expectExactly(want...)
}
