//go:build linux

package mqtt_test

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// readLoops counts the goroutines running a connection's read loop.
func readLoops(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	return bytes.Count(buf.Bytes(), []byte("mqtt.(*conn).readLoop"))
}

// TestIdleConnectionsPark checks that connected sessions waiting for
// input hold no read-loop goroutine, and that a parked connection comes
// back for each way it can: its client's next packet (a PUBACK, then a
// PUBLISH), and the end of its context (a takeover by a new connection
// of the same client id, told with a DISCONNECT). The keep-alive wake is
// checked by the will tests (a silent client's keep alive expiring).
func TestIdleConnectionsPark(t *testing.T) {
	s := startBroker(t)
	const n = 20
	subs := make([]*rawClient, n)
	for i := range subs {
		subs[i], _ = connectRaw(t, s.Addr, connect5Packet(fmt.Sprintf("park-%d", i), true, 600))
		subs[i].Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: fmt.Sprintf("park/%d", i), QoS: packet.QoS1}}})
		subs[i].Expect(packet.TypeSuback, 1)
	}
	idle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for readLoops(t) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d read loops still hold goroutines", what, readLoops(t))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	idle("sessions connected and subscribed")

	pub, _ := connectRaw(t, s.Addr, connect5Packet("park-pub", true, 0))
	for i := range 2 {
		pub.Send(&packet.Publish{Topic: "park/3", QoS: packet.QoS1, PacketID: uint16(i + 1), Payload: []byte{byte(i)}})
		pub.Expect(packet.TypePuback, uint16(i+1))
		p := subs[3].ReadPublish()
		if !bytes.Equal(p.Payload, []byte{byte(i)}) {
			t.Fatalf("delivery %d: payload %v", i, p.Payload)
		}
		subs[3].Send(&packet.Puback{PacketID: p.PacketID})
	}
	// The subscriber's own PUBLISH reaches the parked loop too.
	subs[3].Send(&packet.Publish{Topic: "park/4", QoS: packet.QoS1, PacketID: 7, Payload: []byte("x")})
	subs[3].Expect(packet.TypePuback, 7)
	if p := subs[4].ReadPublish(); string(p.Payload) != "x" {
		t.Fatalf("from a parked publisher: %q", p.Payload)
	}
	idle("after the deliveries")

	again, ack := connectRaw(t, s.Addr, connect5Packet("park-5", false, 600))
	if !ack.SessionPresent {
		t.Fatal("the taken-over session was not present")
	}
	d, ok := subs[5].Expect(packet.TypeDisconnect, 0).(*packet.Disconnect)
	if !ok || d.ReasonCode != packet.SessionTakenOver {
		t.Fatalf("the parked connection taken over got %v, want a DISCONNECT with SessionTakenOver", d)
	}
	pub.Send(&packet.Publish{Topic: "park/5", QoS: packet.QoS1, PacketID: 9, Payload: []byte("y")})
	pub.Expect(packet.TypePuback, 9)
	if p := again.ReadPublish(); string(p.Payload) != "y" {
		t.Fatalf("after the takeover: %q", p.Payload)
	}
}

// A parked connection woken by a burst larger than its read buffer
// reads all of it. The poller reports input as it arrives, not as it
// sits in the socket, so a connection that parks after one buffer's
// worth must say that the socket may hold more, or it would wait
// for the rest until the keep alive ran out.
func TestParkedConnectionReadsABurst(t *testing.T) {
	s := startBroker(t)
	c, _ := connectRaw(t, s.Addr, connect5Packet("burst", true, 600))
	deadline := time.Now().Add(wait)
	for readLoops(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection did not park")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // past the wait for a next packet of an exchange
	// 16 bytes each, so that one buffer's worth ends at a packet's end
	// and reading it whole leaves the read loop nothing buffered.
	const n = 600
	burst := make([]packet.Packet, n)
	for i := range burst {
		burst[i] = &packet.Publish{Topic: "b/xy", QoS: packet.QoS1, PacketID: uint16(i + 1), Payload: []byte("01234")}
	}
	var enc bytes.Buffer
	if err := packet.NewWriter(&enc, packet.V5).WritePacket(burst[0]); err != nil || enc.Len() != 16 {
		t.Fatalf("a PUBLISH of %d bytes (%v), want 16", enc.Len(), err)
	}
	c.Send(burst...)
	for i := range n {
		c.Expect(packet.TypePuback, uint16(i+1))
	}
}
