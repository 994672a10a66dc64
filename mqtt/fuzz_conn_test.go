package mqtt_test

// The connection state machine under arbitrary packet sequences: whatever
// a client sends after its CONNECT, the broker neither panics nor stops
// serving others.

import (
	"bufio"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// fuzzTopics are the topics a program may name: few, so that PUBLISHes
// meet subscriptions, plus a wildcard and an invalid name.
var fuzzTopics = []string{"f/a", "f/b", "f/+", "f/#", "$SYS/x", "f/\x00", ""}

// fuzzProgram turns b into a packet sequence: the first byte picks the
// protocol level and clean start, then every op byte picks a packet whose
// fields come from the bytes after it; op 15 writes the next bytes raw.
func fuzzProgram(b []byte) (*packet.Connect, packet.Version, [][]byte) {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		v := b[0]
		b = b[1:]
		return v
	}
	head := next()
	v := packet.V311
	if head&1 == 1 {
		v = packet.V5
	}
	cp := &packet.Connect{Version: v, ClientID: "fuzz", CleanStart: head&2 == 0, KeepAlive: 30}
	if v == packet.V5 && head&4 != 0 {
		cp.Properties.SetSessionExpiry(60)
		cp.Properties.SetReceiveMaximum(2)
	}
	var out [][]byte
	for len(b) > 0 {
		op, arg := next(), next()
		pi := uint16(arg%4) + 1
		topic := fuzzTopics[int(arg>>2)%len(fuzzTopics)]
		qos := packet.QoS(arg >> 6 % 3)
		var p packet.Packet
		switch op % 16 {
		case 0:
			p = &packet.Publish{QoS: qos, PacketID: pi, Topic: topic, Payload: []byte{arg}, Retain: arg&0x20 != 0, Dup: arg&0x10 != 0}
			if qos == 0 {
				p.(*packet.Publish).PacketID = 0
			}
		case 1:
			p = &packet.Puback{PacketID: pi}
		case 2:
			p = &packet.Pubrec{PacketID: pi}
		case 3:
			p = &packet.Pubrel{PacketID: pi}
		case 4:
			p = &packet.Pubcomp{PacketID: pi}
		case 5:
			p = &packet.Subscribe{PacketID: pi, Subscriptions: []packet.Subscription{{Filter: topic, QoS: qos}}}
		case 6:
			p = &packet.Unsubscribe{PacketID: pi, Filters: []string{topic}}
		case 7:
			p = &packet.Pingreq{}
		case 8:
			p = &packet.Disconnect{ReasonCode: packet.ReasonCode(arg & 0x04)}
		case 9:
			p = cp
		case 10:
			pub := &packet.Publish{QoS: qos, PacketID: pi, Topic: topic, Payload: []byte("alias")}
			if qos == 0 {
				pub.PacketID = 0
			}
			if v == packet.V5 {
				pub.Properties.SetTopicAlias(uint16(arg%3) + 1)
				if arg&1 == 1 {
					pub.Topic = ""
				}
			}
			p = pub
		case 15:
			n := int(arg % 32)
			raw := b[:min(n, len(b))]
			b = b[len(raw):]
			out = append(out, append([]byte{}, raw...))
			continue
		default:
			p = &packet.Pingreq{}
		}
		enc, err := p.Append(nil, v)
		if err != nil {
			continue // not encodable at this level: the codec's own tests cover it
		}
		out = append(out, enc)
	}
	return cp, v, out
}

// probe checks the broker still serves: a new client connects and gets a
// PINGRESP.
func probe(t testing.TB, addr string) {
	nc, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatalf("the broker stopped accepting: %v", err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(wait))
	w, rd := packet.NewWriter(nc, packet.V5), packet.NewReader(bufio.NewReader(nc), 0)
	rd.SetVersion(packet.V5)
	if err := w.WritePacket(connect5Packet("fuzz-probe", true, 0)); err != nil {
		t.Fatalf("probe CONNECT: %v", err)
	}
	if err := w.WritePacket(&packet.Pingreq{}); err != nil {
		t.Fatalf("probe PINGREQ: %v", err)
	}
	for _, want := range []packet.Type{packet.TypeConnack, packet.TypePingresp} {
		p, err := rd.ReadPacket()
		if err != nil || p.Type() != want {
			t.Fatalf("probe: %v %v, want %v", p, err, want)
		}
	}
}

func FuzzConnSequence(f *testing.F) {
	for _, seed := range [][]byte{
		{0},
		{1, 5, 0x40, 0, 0x41, 3, 0x41, 8, 0}, // subscribe, QoS 1 publish, PUBREL, disconnect
		{5, 0, 0x81, 0, 0x82, 0, 0x83, 3, 0x81, 3, 0x82}, // QoS 2 past a receive maximum of 2, releases
		{1, 10, 1, 10, 2, 10, 3},                         // topic aliases, an unknown one
		{0, 9, 0},                                        // a second CONNECT
		{3, 0, 0x7f, 15, 6, 0x30, 0xff, 0xff, 0xff, 0xff, 0x7f}, // a bad remaining length
		{1, 5, 0x18, 0, 0x58, 2, 1, 4, 1, 6, 0x18},              // wildcard subscribe, acks for unknown ids
	} {
		f.Add(seed)
	}
	s := mqtttest.Start(f, testEngine, nil, mqtt.Options{ReceiveMaximum: 8, ConnectTimeout: time.Second})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 512 {
			return
		}
		cp, v, prog := fuzzProgram(b)
		nc, err := net.DialTimeout("tcp", s.Addr, wait)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer nc.Close()
		w := packet.NewWriter(nc, v)
		if err := w.WritePacket(cp); err != nil {
			t.Fatalf("CONNECT: %v", err)
		}
		go func() { // read everything until the broker closes or goes quiet
			_ = nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			var buf [4096]byte
			for {
				if _, err := nc.Read(buf[:]); err != nil {
					return
				}
			}
		}()
		for _, enc := range prog {
			if _, err := nc.Write(enc); err != nil {
				break // the broker closed the connection: allowed
			}
		}
		time.Sleep(time.Millisecond)
		nc.Close()
		probe(t, s.Addr)
	})
}

// A broker's whole life, with clients, an idle socket, a refused topic
// and a flood past the cap, leaves no goroutine behind once the broker, the
// tables and the engine are closed.
func TestBrokerLifecycleLeaksNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := &mqtttest.Server{Engine: testEngine, Dir: t.TempDir(), Opts: mqtt.Options{MaxConnections: 8, MaxTopicLength: 64}}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	func() {
		var idle []net.Conn
		defer func() {
			for _, nc := range idle {
				nc.Close()
			}
		}()
		for range 12 {
			nc, err := net.DialTimeout("tcp", s.Addr, wait)
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, nc)
		}
		r, _ := connectRaw(t, s.Addr, connect5Packet("leak-raw", true, 0))
		r.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "leak/#", QoS: 1}}})
		r.Read("packet") // SUBACK
		r.Send(&packet.Publish{QoS: packet.QoS1, PacketID: 2, Topic: "leak/t", Payload: []byte("x")})
		r.Send(&packet.Publish{QoS: packet.QoS1, PacketID: 3, Topic: longTopic("leak/", 100), Payload: []byte("x")})
		got := map[packet.Type]int{}
		for range 3 {
			got[r.Read("packet").Type()]++
		}
		if got[packet.TypePuback] != 2 || got[packet.TypePublish] != 1 {
			t.Fatalf("got %v, want two PUBACKs and the PUBLISH", got)
		}
		c := connect5(t, s.Addr, "leak-5", false, 60)
		c.sub("leak/t", 2)
		c.close()
		r.Conn().Close()
	}()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
