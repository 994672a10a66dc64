package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/internal/prop"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The qos2 cases about the pipeline itself: its window, its copy caps and
// how it fails.

// caseWindowFullWithStalledStore (Q12): with every staging commit stalled,
// the broker reads one window of PUBLISHes (its receive maximum, 1,024 FIFO
// entries) and stops reading; after the store timeout the connection fails
// with no acknowledgement sent. Once the store recovers, the client's
// re-sends on a new connection complete with each message delivered exactly
// once.
func caseWindowFullWithStalledStore(t T, tg Target) {
	const n, window = 1100, 1024
	f := newBrokerFaults()
	// The store timeout also bounds every commit of the second phase,
	// where 1,100 stagings and releases go at once: under the race
	// detector on a busy machine one gathered commit of a shared
	// JetStream stream took over a second.
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks(), StoreTimeout: 3 * time.Second, ReceiveMaximum: window})
	sub := newSubscriber(t, "sub", s.Addr, "q12-sub", packet.V311, "q12/foo", packet.QoS1)
	release := f.holdAcks(mqtt.KindStage)
	pub, _ := connectRaw(t, "pub", s.Addr, "q12-pub", packet.V311, false)
	go func() { _ = pub.TrySend(burstQoS2("q12/foo", "msg-", 1, n)...) }()
	if !pub.Closed(waitFor) {
		t.Fatalf("the connection survived a store stalled past the store timeout")
	}
	for _, p := range pub.Drain() {
		t.Fatalf("got %s from a stalled pipeline", mqtttest.Describe(p))
	}
	if staged := f.submitted(mqtt.KindStage); staged > window+1 || staged < window {
		t.Fatalf("the broker staged %d of %d PUBLISHes with its pipeline stalled, want it to stop after the window of %d", staged, n, window)
	}
	release()

	pub, _ = connectRaw(t, "pub", s.Addr, "q12-pub", packet.V311, false)
	var resend []packet.Packet
	for _, p := range burstQoS2("q12/foo", "msg-", 1, n) {
		resend = append(resend, dupOf(p.(*packet.Publish)))
	}
	pub.Send(resend...)
	pub.ExpectSeq(acks(packet.TypePubrec, 1, n)...)
	pub.Send(pubrels(1, n)...)
	pub.ExpectSeq(acks(packet.TypePubcomp, 1, n)...)
	sub.expectExactly(seqPayloads("msg-", 1, n)...)
}

// caseCopyCapExceeded (Q13): 1,100 publications of 4 KB in flight (over both
// copy caps, 1,024 messages and 4 MB; the note's 8 KB doubles the bytes for
// nothing) before any PUBREL. Past the cap the connection keeps no copy and
// the PUBREL reads the staged message: deliveries are the same as within the
// cap, and the store is read exactly once per uncached publication.
func caseCopyCapExceeded(t T, tg Target) {
	const n = 1100
	f := newBrokerFaults()
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks()})
	sub := newSubscriber(t, "sub", s.Addr, "q13-sub", packet.V311, "q13/foo", packet.QoS1)
	pub, _ := connectRaw(t, "pub", s.Addr, "q13-pub", packet.V311, true)
	payload := func(i int) string {
		p := fmt.Sprintf("msg-%d:", i)
		return p + strings.Repeat("x", 4000-len(p))
	}
	var burst []packet.Packet
	for i := 1; i <= n; i++ {
		burst = append(burst, pubQoS2(uint16(i), "q13/foo", payload(i)))
	}
	pub.Send(burst...)
	pub.ExpectSeq(acks(packet.TypePubrec, 1, n)...)
	pub.Send(pubrels(1, n)...)
	pub.ExpectSeq(acks(packet.TypePubcomp, 1, n)...)
	var want []string
	for i := 1; i <= n; i++ {
		want = append(want, payload(i))
	}
	got := sub.expectExactly(want...)
	if len(got) != n {
		t.Fatalf("got %d deliveries", len(got))
	}
	// The broker keeps copies while they fit in 1,024 messages and 4 MB
	// of stored form (mqtt.Message's binary encoding).
	m := mqtt.Message{Topic: "q13/foo", Payload: []byte(payload(1)), QoS: 2, From: "q13-pub"}
	enc, err := m.MarshalBinary()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	kept := min(1024, (4<<20)/len(enc))
	if loads := f.count(mqtt.PointStagedLoad); loads != n-kept {
		t.Fatalf("%d PUBRELs read the store, want %d (the %d publications past the copy cap)", loads, n-kept, n-kept)
	}
}

// caseStoreErrorMidBurst (Q15): the 30th store of a 60-packet burst (QoS 1
// and 2 alternating) fails: acknowledgements 1..29 come out, none after, and
// the connection closes. After reconnecting, the client's re-sends deliver
// the QoS 2 messages exactly once and the QoS 1 ones at least once.
func caseStoreErrorMidBurst(t T, tg Target) {
	const n, failAt = 60, 30
	f := newBrokerFaults()
	var mu sync.Mutex
	seen := 0
	f.failAcks(func(k mqtt.Kind, client string) error {
		if client != "q15-pub" || (k != mqtt.KindPublish && k != mqtt.KindStage) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == failAt {
			return errors.New("injected store failure")
		}
		return nil
	})
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks()})
	sub := newSubscriber(t, "sub", s.Addr, "q15-sub", packet.V5, "q15/foo", packet.QoS2)
	burst := func(dup bool) ([]packet.Packet, []ack) {
		var ps []packet.Packet
		var want []ack
		for i := 1; i <= n; i++ {
			p := pubQoS1(uint16(i), "q15/foo", fmt.Sprintf("m%d", i))
			typ := packet.TypePuback
			if i%2 == 0 {
				p.QoS, typ = packet.QoS2, packet.TypePubrec
			}
			p.Dup = dup
			ps = append(ps, p)
			want = append(want, ack{Type: typ, PacketID: uint16(i)})
		}
		return ps, want
	}
	pub, _ := connectRaw(t, "pub", s.Addr, "q15-pub", packet.V5, false)
	ps, want := burst(false)
	pub.Send(ps...)
	pub.ExpectSeq(want[:failAt-1]...)
	if !pub.Closed(waitFor) {
		t.Fatalf("the connection survived a failed store")
	}
	for _, p := range pub.Drain() {
		if p.Type() != packet.TypeDisconnect {
			t.Fatalf("got %s after the failed store", mqtttest.Describe(p))
		}
	}

	pub, _ = connectRaw(t, "pub", s.Addr, "q15-pub", packet.V5, false)
	ps, want = burst(true)
	pub.Send(ps...)
	pub.ExpectSeq(want...)
	var rels []packet.Packet
	var comps []ack
	for i := 2; i <= n; i += 2 {
		rels = append(rels, pubrel(uint16(i)))
		comps = append(comps, ack{Type: packet.TypePubcomp, PacketID: uint16(i)})
	}
	pub.Send(rels...)
	pub.ExpectSeq(comps...)
	sub.waitTook(seqPayloads("m", 1, n)...)
	time.Sleep(quiet)
	got := countPayloads(sub.deliveries())
	for i := 1; i <= n; i++ {
		p := fmt.Sprintf("m%d", i)
		if (i%2 == 0 && got[p] != 1) || got[p] < 1 {
			t.Fatalf("%s (QoS %d) delivered %d times", p, 2-i%2, got[p])
		}
	}
}

// casePropertyQoS1Pipeline (Q21) is the QoS 1 pipeline property: random
// bursts, random store delays, a random injected store failure and a random
// abrupt close. Invariants: PUBACKs come in PUBLISH order; every PUBACKed
// message reaches the subscriber; no PUBACK for the failed store or anything
// after it on that connection. 60 bursts per engine (the note gives no
// count).
func casePropertyQoS1Pipeline(t T, tg Target) {
	f := newBrokerFaults()
	var mu sync.Mutex
	failAt := map[string]int{} // client -> store number that fails
	seen := map[string]int{}
	f.failAcks(func(k mqtt.Kind, client string) error {
		mu.Lock()
		defer mu.Unlock()
		if k != mqtt.KindPublish {
			return nil
		}
		seen[client]++
		if seen[client] == failAt[client] {
			return errors.New("injected store failure")
		}
		return nil
	})
	delays := make(chan time.Duration, 1<<12)
	f.delayAcks(mqtt.KindPublish, func() time.Duration {
		select {
		case d := <-delays:
			return d
		default:
			return 0
		}
	})
	s := startBroker(t, tg, mqtt.Options{Hooks: f.hooks()})
	sub := newSubscriber(t, "sub", s.Addr, "q21-sub", packet.V311, "q21/#", packet.QoS1)
	round := 0
	prop.Check(t, "Q21", func(rt *prop.T) {
		round++
		client := fmt.Sprintf("q21-pub-%d", round)
		topic := "q21/" + client
		n := rt.IntRange(1, 25, "burst")
		fail := 0
		if rt.IntRange(0, 2, "fail?") == 0 {
			fail = rt.IntRange(1, n, "fail at")
		}
		closeAfter := 0
		if rt.IntRange(0, 2, "close?") == 0 {
			closeAfter = rt.IntRange(1, n, "close after")
		}
		for i := 0; i < n; i++ {
			if rt.IntRange(0, 3, "delay?") == 0 {
				delays <- time.Duration(rt.IntRange(0, 3000, "delay us")) * time.Microsecond
			}
		}
		mu.Lock()
		failAt[client] = fail
		mu.Unlock()
		v := packet.V311
		if round%2 == 0 {
			v = packet.V5
		}
		pub, _ := connectRaw(t, "pub", s.Addr, client, v, true)
		var ps []packet.Packet
		for i := 1; i <= n; i++ {
			ps = append(ps, pubQoS1(uint16(i), topic, fmt.Sprintf("%s/%d", client, i)))
		}
		if closeAfter > 0 {
			pub.Send(ps[:closeAfter]...)
			time.Sleep(time.Duration(rt.IntRange(0, 2000, "close delay us")) * time.Microsecond)
			pub.Drop()
		} else {
			pub.Send(ps...)
			last := n
			if fail > 0 {
				last = fail - 1
			}
			pub.ExpectSeq(acks(packet.TypePuback, 1, last)...)
			if fail > 0 && !pub.Closed(waitFor) {
				rt.Fatalf("connection survived the failed store %d", fail)
			}
		}
		var acked []int
		for _, p := range pub.Drain() {
			if p.Type() == packet.TypeDisconnect {
				continue
			}
			if p.Type() != packet.TypePuback {
				rt.Fatalf("got %s", mqtttest.Describe(p))
			}
			acked = append(acked, int(mqtttest.PacketID(p)))
		}
		// acked holds what came after the expected prefix (closed runs:
		// everything); either way it must continue the PUBLISH order and
		// stop before the failed store.
		if closeAfter > 0 {
			for i, pi := range acked {
				if pi != i+1 || (fail > 0 && pi >= fail) {
					rt.Fatalf("PUBACKs %v after a close (fail at %d): not a prefix of the PUBLISH order", acked, fail)
				}
			}
		} else if len(acked) > 0 {
			rt.Fatalf("extra PUBACKs %v", acked)
		}
		var want []string
		hi := n
		if closeAfter > 0 {
			hi = len(acked)
		} else if fail > 0 {
			hi = fail - 1
		}
		for i := 1; i <= hi; i++ {
			want = append(want, fmt.Sprintf("%s/%d", client, i))
		}
		sub.waitTook(want...)
		pub.Drop()
		got := sub.payloads()
		for _, w := range want {
			if !slices.Contains(got, w) {
				rt.Fatalf("PUBACKed %s never delivered", w)
			}
		}
	})
}
