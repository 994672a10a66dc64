package mqtt_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/mqtt"
)

// ackingSub is a subscriber that acknowledges QoS 1 deliveries only when
// told, of either protocol version.
type ackingSub struct {
	// next returns the topic=payload of the next n deliveries, with a
	// function acknowledging each.
	next func(n int) ([]string, []func())
	none func(d time.Duration)
}

// ackingSubs connects such a subscriber under each protocol version,
// subscribed to filter at QoS 1.
var ackingSubs = []struct {
	name    string
	connect func(t *testing.T, addr, id, filter string) ackingSub
}{
	{"3.1.1", func(t *testing.T, addr, id, filter string) ackingSub {
		c, _, err := dial3(t, addr, id, true, func(o *paho3.ClientOptions) { o.SetAutoAckDisabled(true) })
		if err != nil {
			t.Fatal(err)
		}
		c.sub(filter, 1)
		return ackingSub{
			next: func(n int) ([]string, []func()) {
				var got []string
				var acks []func()
				for _, m := range c.expect(n) {
					got = append(got, m.Topic()+"="+string(m.Payload()))
					acks = append(acks, m.Ack)
				}
				return got, acks
			},
			none: c.expectNone,
		}
	}},
	{"5.0", func(t *testing.T, addr, id, filter string) ackingSub {
		c, err := dial5(t, addr, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30},
			func(cfg *paho.ClientConfig) {
				cfg.EnableManualAcknowledgment = true
				cfg.SendAcksInterval = 5 * time.Millisecond
			})
		if err != nil {
			t.Fatal(err)
		}
		c.sub(filter, 1)
		return ackingSub{
			next: func(n int) ([]string, []func()) {
				var got []string
				var acks []func()
				for _, p := range c.expect(n) {
					got = append(got, p.Topic+"="+string(p.Payload))
					acks = append(acks, func() {
						if err := c.Ack(p); err != nil {
							t.Errorf("ack: %v", err)
						}
					})
				}
				return got, acks
			},
			none: c.expectNone,
		}
	}},
}

// payloadOf returns a payload of size bytes naming message i.
func payloadOf(i, size int) string {
	p := fmt.Sprintf("m%03d-", i)
	return p + strings.Repeat("x", size-len(p))
}

// TestInflightBytesHoldsAndResumes: under Options.MaxInflightBytes the
// broker sends a subscriber QoS 1 deliveries while the payload bytes in
// flight are under the limit, then waits: nothing more arrives until an
// acknowledgement frees room, and then deliveries go on in order, none
// lost or repeated. A message larger than the limit goes alone.
func TestInflightBytesHoldsAndResumes(t *testing.T) {
	const limit, size = 1000, 300
	for _, v := range ackingSubs {
		t.Run(v.name, func(t *testing.T) {
			s := startBroker(t, func(o *mqtt.Options) { o.MaxInflightBytes = limit })
			sub := v.connect(t, s.Addr, "ib-sub", "ib/#")
			pub := connect3(t, s.Addr, "ib-pub", true)
			var pubs [][2]string
			var want []string
			for i := range 24 {
				pubs = append(pubs, [2]string{"ib/t", payloadOf(i, size)})
				want = append(want, "ib/t="+payloadOf(i, size))
			}
			pub.pubBurst(1, pubs...)

			// 0, 300, 600 and 900 bytes in flight are under 1,000: four
			// go, and the fifth waits for room.
			got, acks := sub.next(4)
			sub.none(300 * time.Millisecond)
			if hits := s.Broker().Stats().LimitHits["inflight_bytes"]; hits == 0 {
				t.Fatalf("limit hits for inflight_bytes = 0 with %d bytes in flight", 4*size)
			}
			if n := s.Broker().Stats().InflightOut; n != 4 {
				t.Fatalf("in flight = %d, want 4", n)
			}
			// One acknowledgement frees room for exactly one more.
			acks[0]()
			g, a := sub.next(1)
			got, acks = append(got, g...), append(acks[1:], a...)
			sub.none(300 * time.Millisecond)
			// The rest flows as the subscriber acknowledges.
			for len(got) < len(want) {
				for _, ack := range acks {
					ack()
				}
				g, a := sub.next(1)
				got, acks = append(got, g...), a
			}
			for _, ack := range acks {
				ack()
			}
			if !slices.Equal(got, want) {
				t.Fatalf("received %d deliveries out of order or not all:\n%v\nwant\n%v", len(got), got, want)
			}
			sub.none(200 * time.Millisecond)

			// A PUBLISH over the limit goes alone; the two after it wait
			// for its acknowledgement.
			pub.pubBurst(1, [2]string{"ib/big", payloadOf(100, 2500)}, [2]string{"ib/t", payloadOf(101, size)},
				[2]string{"ib/t", payloadOf(102, size)})
			g, a = sub.next(1)
			if g[0] != "ib/big="+payloadOf(100, 2500) {
				t.Fatalf("received %.20q, want the large message first", g[0])
			}
			sub.none(300 * time.Millisecond)
			a[0]()
			g, a = sub.next(2)
			if want := []string{"ib/t=" + payloadOf(101, size), "ib/t=" + payloadOf(102, size)}; !slices.Equal(g, want) {
				t.Fatalf("after the large message received %v, want %v", g, want)
			}
			for _, ack := range a {
				ack()
			}
			sub.none(200 * time.Millisecond)
		})
	}
}
