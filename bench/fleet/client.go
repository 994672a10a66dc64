package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The client side of the fleet, shared by its transports: what a device
// sends when it connects, how its input is cut into packets, and what it
// records of each PUBLISH. The transports (client_linux.go, elsewhere
// client_other.go) move the bytes.

// device is one persistent session of the fleet.
type device struct {
	id, topic string
	src       net.IP // the local address it connects from; nil: the kernel's choice
	link      link   // the transport's connection, under mu
	mu        sync.Mutex
	rest      []byte         // input after the last whole packet, under mu
	seen      map[uint64]int // message number -> deliveries
	lat       []sample
	last      time.Time
	count     atomic.Int64 // distinct messages received
}

// sources is how many loopback addresses the fleet connects from (see
// rawconn.DialFrom): one would leave each connect searching through the
// ephemeral ports the fleet already holds.
const sources = 16

// sourceFor is device i's local address towards a broker at addr: one of
// sources loopback addresses when the broker is on loopback, else nil.
func sourceFor(addr string, i int) net.IP {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil
	}
	return net.IPv4(127, 0, 0, byte(1+i%sources))
}

// hello is what a device sends on connecting: CONNECT (clean session
// off), and with subscribe a SUBSCRIBE to its topic and the fleet's.
func (d *device) hello(subscribe bool) []byte {
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: d.id, KeepAlive: 0}).Append(nil, packet.V311)
	if subscribe {
		sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: d.topic, QoS: 1}, {Filter: "fleet/all", QoS: 1}}}
		out, _ = sub.Append(out, packet.V311)
	}
	return out
}

// errShort says a packet is not whole yet.
var errShort = errors.New("fleet: packet not whole")

// nextPacket returns the first whole packet of b (fixed header included)
// and its length, or errShort.
func nextPacket(b []byte) ([]byte, error) {
	size, mult := 0, 1
	for i := 1; i < len(b) && i <= 4; i++ {
		size += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			if n := i + 1 + size; n <= len(b) {
				return b[:n], nil
			}
			return nil, errShort
		}
		mult <<= 7
	}
	if len(b) > 5 {
		return nil, fmt.Errorf("fleet: malformed remaining length % x", b[:5])
	}
	return nil, errShort
}

// greeted checks the answer to hello in in: CONNACK accepted (and for a
// reconnect, session present) and with subscribe a SUBACK. It returns the
// input after them, or errShort while they are not all in.
func (d *device) greeted(in []byte, subscribe bool) ([]byte, error) {
	p, err := nextPacket(in)
	if err != nil {
		return nil, err
	}
	// A reconnect must find its session; a first connect may too, when
	// an earlier attempt of it got as far as the CONNECT.
	if len(p) != 4 || p[0] != byte(packet.TypeConnack)<<4 || p[3] != 0 || (!subscribe && p[2]&1 == 0) {
		return nil, fmt.Errorf("CONNACK: got % x (session present expected %v)", p, !subscribe)
	}
	in = in[len(p):]
	if !subscribe {
		return in, nil
	}
	if p, err = nextPacket(in); err != nil {
		return nil, err
	}
	if p[0] != byte(packet.TypeSuback)<<4 {
		return nil, fmt.Errorf("got % x, want SUBACK", p)
	}
	return in[len(p):], nil
}

// receive takes the whole packets of in, records the PUBLISHes among
// them and appends their PUBACKs to acks; it returns acks and the length
// of in it took (a packet not whole yet stays). d.mu is held.
func (d *device) receive(in, acks []byte, now time.Time) ([]byte, int, error) {
	took := 0
	for {
		p, err := nextPacket(in[took:])
		if errors.Is(err, errShort) {
			return acks, took, nil
		}
		if err != nil {
			return acks, took, err
		}
		took += len(p)
		if p[0]>>4 != byte(packet.TypePublish) {
			continue
		}
		qos := p[0] >> 1 & 3
		body := p[1:]
		for body[0]&0x80 != 0 { // the remaining length
			body = body[1:]
		}
		body = body[1:]
		skip := 2 // the topic
		if len(body) >= 2 {
			skip += int(binary.BigEndian.Uint16(body))
		}
		if qos > 0 {
			skip += 2 // the packet id
		}
		if len(body) < skip {
			return acks, took, fmt.Errorf("fleet: short PUBLISH % x", p)
		}
		pi := body[skip-2 : skip]
		body = body[skip:]
		d.record(body, now)
		if qos == 1 {
			acks = append(acks, byte(packet.TypePuback)<<4, 2, pi[0], pi[1])
		}
	}
}

// record notes the delivery of a payload written by publishFrom: its
// publication time and its message number.
func (d *device) record(payload []byte, now time.Time) {
	if len(payload) < 16 {
		return
	}
	num := binary.BigEndian.Uint64(payload[8:])
	sent := time.Unix(0, int64(binary.BigEndian.Uint64(payload)))
	if d.seen == nil {
		d.seen = map[uint64]int{}
	}
	d.seen[num]++
	if d.seen[num] == 1 {
		d.count.Add(1)
		d.lat = append(d.lat, sample{sent: sent, lat: now.Sub(sent)})
		d.last = now
	}
}
