package conformance

import (
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
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
	pub.send(pubQoS2(1, "q08/a", "held-before-commit"), pubrel(1))
	fa.waitHeld(t, mqtt.KindRelease)
	pub.drop()
	pub, ackp := connectRaw(t, "pub@B", bAddr, "q08-pub", packet.V5, false)
	if !ackp.SessionPresent {
		t.Fatalf("session not present on node B")
	}
	pub.send(pubrel(1))
	if rc := reasonOf(pub.expect(packet.TypePubcomp, 1)); rc != packet.Success {
		t.Fatalf("PUBCOMP from B: reason %v, want success (B released the staged message)", rc)
	}
	release()
	subA.expectExactly("held-before-commit")
	subB.expectExactly("held-before-commit")
	pub.silence(quiet)
	pub.disconnect()

	pub, _ = connectRaw(t, "pub@A", a.Addr, "q08-pub", packet.V5, false)
	release = fa.holdAcks(mqtt.KindRelease)
	pub.send(pubQoS2(2, "q08/b", "held-after-commit"), pubrel(2))
	pub.expect(packet.TypePubrec, 2)
	subA.waitTook("held-after-commit") // committed, its PUBCOMP held
	pub.drop()
	pub, _ = connectRaw(t, "pub@B", bAddr, "q08-pub", packet.V5, false)
	pub.send(pubrel(2))
	if rc := reasonOf(pub.expect(packet.TypePubcomp, 2)); rc != packet.PacketIdentifierNotFound {
		t.Fatalf("PUBCOMP from B: reason %v, want 0x92 (released on A already)", rc)
	}
	release()
	pub.silence(quiet)
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
	c1.send(burstQoS2("q16/x", "msg-", 1, 30)...)
	c1.expectSeq(acks(packet.TypePubrec, 1, 30)...)
	release := fa.holdAcks(mqtt.KindRelease)
	defer release()
	c1.send(pubrels(21, 30)...)
	subA.waitTook(seqPayloads("msg-", 21, 30)...) // released, PUBCOMPs held

	c2 := dialRaw(t, "C@B", bAddr, packet.V5)
	ack := c2.connect(connectPacket("q16-c", packet.V5, false))
	connacked := time.Now()
	if !ack.SessionPresent {
		t.Fatalf("session not present on node B")
	}
	if !c1.closed(100 * time.Millisecond) {
		t.Fatalf("A's connection was still open when B's CONNACK arrived")
	}
	if c1.closedAt.After(connacked) {
		t.Fatalf("A's connection closed %v after B's CONNACK", c1.closedAt.Sub(connacked))
	}
	var got []string
	for _, p := range c1.drain() {
		got = append(got, describe(p))
	}
	if !slices.Equal(got, []string{describe(&packet.Disconnect{ReasonCode: packet.SessionTakenOver})}) {
		t.Fatalf("A's connection got %v after the takeover, want only DISCONNECT 0x8E", got)
	}
	release()

	var resend []packet.Packet
	for _, p := range burstQoS2("q16/x", "msg-", 1, 20) {
		resend = append(resend, dupOf(p.(*packet.Publish)))
	}
	c2.send(resend...)
	c2.expectSeq(acks(packet.TypePubrec, 1, 20)...)
	c2.send(pubrels(1, 30)...)
	c2.expectSeq(acks(packet.TypePubcomp, 1, 30)...)
	c2.silence(quiet)
	want := append(seqPayloads("msg-", 21, 30), seqPayloads("msg-", 1, 20)...)
	subA.expectExactly(want...)
	subB.expectExactly(want...)
}
