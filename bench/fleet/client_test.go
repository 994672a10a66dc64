package fleet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestReceiveInPieces feeds a device PUBLISHes cut at every byte and
// checks each is recorded once, acknowledged once (QoS 1 only) and that a
// partial packet waits for the rest.
func TestReceiveInPieces(t *testing.T) {
	var in []byte
	for k := range 3 {
		payload := make([]byte, 64)
		binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(payload[8:], uint64(100+k))
		p := &packet.Publish{Topic: "fleet/dev/7", QoS: packet.QoS(k % 2), PacketID: uint16(k % 2 * (k + 1)), Payload: payload}
		in, _ = p.Append(in, packet.V311)
	}
	// A payload of 200 bytes takes a two-byte remaining length.
	big := &packet.Publish{Topic: "fleet/all", QoS: 1, PacketID: 9, Payload: make([]byte, 200)}
	binary.BigEndian.PutUint64(big.Payload[8:], 200)
	in, _ = big.Append(in, packet.V311)
	for cut := range len(in) {
		d := &device{}
		acks, took, err := d.receive(in[:cut], nil, time.Now())
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		rest := append([]byte(nil), in[took:cut]...)
		rest = append(rest, in[cut:]...)
		acks, took2, err := d.receive(rest, acks, time.Now())
		if err != nil || took2 != len(rest) {
			t.Fatalf("cut at %d: took %d of %d, %v", cut, took2, len(rest), err)
		}
		want := []byte{0x40, 2, 0, 2, 0x40, 2, 0, 9}
		if !bytes.Equal(acks, want) {
			t.Fatalf("cut at %d: acks % x, want % x", cut, acks, want)
		}
		if d.count.Load() != 4 || len(d.seen) != 4 {
			t.Fatalf("cut at %d: %d messages recorded (%v), want 4", cut, d.count.Load(), d.seen)
		}
	}
	if _, _, err := (&device{}).receive([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, nil, time.Now()); err == nil {
		t.Fatalf("a remaining length of five bytes was taken")
	}
}

// TestGreeted checks the answer to a device's hello.
func TestGreeted(t *testing.T) {
	d := &device{id: "fleet-000001", topic: "fleet/dev/1"}
	connack := func(present bool, rc byte) []byte {
		b, _ := (&packet.Connack{SessionPresent: present, ReasonCode: packet.ReasonCode(rc)}).Append(nil, packet.V311)
		return b
	}
	suback, _ := (&packet.Suback{PacketID: 1, ReasonCodes: []packet.ReasonCode{1, 1}}).Append(nil, packet.V311)
	both := append(connack(false, 0), suback...)
	for n := range len(both) {
		if _, err := d.greeted(both[:n], true); !errors.Is(err, errShort) {
			t.Fatalf("%d of %d bytes: %v, want errShort", n, len(both), err)
		}
	}
	if rest, err := d.greeted(append(both, 0x30), true); err != nil || !bytes.Equal(rest, []byte{0x30}) {
		t.Fatalf("whole answer: rest % x, %v", rest, err)
	}
	if _, err := d.greeted(connack(false, 0), false); err == nil {
		t.Fatalf("a reconnect without its session was taken")
	}
	if _, err := d.greeted(connack(true, 5), false); err == nil {
		t.Fatalf("a refused CONNACK was taken")
	}
	if rest, err := d.greeted(connack(true, 0), false); err != nil || len(rest) != 0 {
		t.Fatalf("reconnect: rest % x, %v", rest, err)
	}
}

// TestSourceFor checks the fleet's local addresses: spread over sources
// loopback addresses towards a loopback broker, the kernel's choice
// towards any other.
func TestSourceFor(t *testing.T) {
	seen := map[string]bool{}
	for i := range 3 * sources {
		ip := sourceFor("127.0.0.1:1883", i)
		if ip == nil || !ip.IsLoopback() {
			t.Fatalf("device %d: source %v, want a loopback address", i, ip)
		}
		seen[ip.String()] = true
	}
	if len(seen) != sources {
		t.Fatalf("%d distinct sources, want %d", len(seen), sources)
	}
	for _, addr := range []string{"10.0.0.1:1883", "[::1]:1883", "localhost"} {
		if ip := sourceFor(addr, 3); ip != nil {
			t.Fatalf("source towards %s: %v, want none", addr, ip)
		}
	}
}
