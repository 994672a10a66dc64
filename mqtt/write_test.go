package mqtt_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestLargeDeliveryAfterQuietSpell: a PUBLISH larger than the write buffer,
// sent after the connection was quiet for longer than the store timeout,
// reaches the client (the write deadline is re-armed for it, not left
// where the last flush put it).
func TestLargeDeliveryAfterQuietSpell(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.StoreTimeout = 200 * time.Millisecond })
	sub := connect5(t, s.Addr, "quiet-sub", true, 0)
	sub.sub("quiet/#", 1)
	pub := connect5(t, s.Addr, "quiet-pub", true, 0)
	pub.pub("quiet/small", 1, false, "small")
	sub.expectOne("quiet/small", "small")
	time.Sleep(600 * time.Millisecond)
	big := strings.Repeat("x", 256<<10)
	pub.pub("quiet/big", 1, false, big)
	sub.expectOne("quiet/big", big)
}

// TestDeliveryAfterQuietSpell is TestLargeDeliveryAfterQuietSpell for
// small messages, which a publisher writes to the subscriber's socket in
// passing, at QoS 0 and 1: the write deadline of the last flush has
// passed, and no write may meet it.
func TestDeliveryAfterQuietSpell(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.StoreTimeout = 200 * time.Millisecond })
	sub := connect5(t, s.Addr, "quiet-sub", true, 0)
	sub.sub("quiet/#", 1)
	pub := connect5(t, s.Addr, "quiet-pub", true, 0)
	for i, qos := range []byte{0, 1, 0, 1} {
		time.Sleep(600 * time.Millisecond)
		msg := fmt.Sprintf("after a quiet spell %d", i)
		pub.pub("quiet/small", qos, false, msg)
		sub.expectOne("quiet/small", msg)
	}
}

// TestQoS0SlowSubscriberHoldsNoPublisher publishes QoS 0 messages one at a
// time to two subscribers, one of which stops reading: the publisher's
// goroutine writes to subscribers in passing, and must never wait on the
// one whose socket is full. The other receives every message in order,
// and the stopped one's are dropped (at most once), not waited for.
func TestQoS0SlowSubscriberHoldsNoPublisher(t *testing.T) {
	s := startBroker(t)
	// The stopped subscriber: CONNECT and SUBSCRIBE, then no more reads,
	// with a small receive buffer so that its socket fills early.
	nc, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(4 << 10)
	w, r := packet.NewWriter(nc, packet.V311), packet.NewReader(nc, 1<<20)
	r.SetVersion(packet.V311) // a client's reader: it reads what a broker sends
	_ = nc.SetDeadline(time.Now().Add(wait))
	if err := w.WritePacket(&packet.Connect{Version: packet.V311, ClientID: "stopped", CleanStart: true, KeepAlive: 600}); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "slow/t", QoS: 0}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []packet.Type{packet.TypeConnack, packet.TypeSuback} {
		p, err := r.ReadPacket()
		if err != nil || p.Type() != want {
			t.Fatalf("stopped subscriber: read %v, %v; want %v", p, err, want)
		}
	}

	fast := dialRaw(t, s.Addr, packet.V311)
	fast.Connect(&packet.Connect{Version: packet.V311, ClientID: "fast", CleanStart: true, KeepAlive: 600})
	fast.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "slow/t", QoS: 0}}})
	fast.Expect(packet.TypeSuback, 1)
	pub := dialRaw(t, s.Addr, packet.V311)
	pub.Connect(&packet.Connect{Version: packet.V311, ClientID: "pub", CleanStart: true, KeepAlive: 600})

	// 16 MB: far more than the stopped subscriber's socket takes. One at
	// a time, each read by the fast subscriber before the next is sent:
	// the publisher's goroutine has no more input and writes each in
	// passing, also when the stopped one's socket fills.
	payload := strings.Repeat("x", 2000)
	for i := range 8000 {
		pub.Send(&packet.Publish{Topic: "slow/t", Payload: []byte(fmt.Sprintf("%06d%s", i, payload))})
		p := fast.ReadPublish()
		if want := fmt.Sprintf("%06d", i); string(p.Payload[:6]) != want {
			t.Fatalf("fast subscriber got message %s, want %s", p.Payload[:6], want)
		}
	}
	st := s.Broker().Stats()
	if st.Dropped["slow"] == 0 {
		t.Fatalf("no delivery to the stopped subscriber was dropped (stats %+v): its socket never filled", st.Dropped)
	}
}
