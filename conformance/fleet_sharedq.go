package conformance

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// caseFleetSharedQueue (F02): a shared group of persistent members, half
// 3.1.1 and half 5.0, all offline while QoS 1 and 2 messages are
// published to it, before and after a restart of the broker. The members
// then come back one at a time: the group must get every message exactly
// once, the first member back all of them, each in publication order per
// topic and QoS.
func caseFleetSharedQueue(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	const members = 20
	devs := make([]*fleetDevice, members)
	for i := range devs {
		d := &fleetDevice{id: fmt.Sprintf("f02-%02d", i), v: packet.V311, pending: map[uint16]bool{}, group: "g2"}
		if i%2 == 0 {
			d.v = packet.V5
		}
		d.subs = []packet.Subscription{{Filter: "$share/g2/f02/#", QoS: packet.QoS2}}
		d.dial(t, s.Addr, true)
		if err := d.send(&packet.Subscribe{PacketID: 1, Subscriptions: d.subs}); err != nil {
			t.Fatalf("%s: subscribe: %v", d.id, err)
		}
		devs[i] = d
	}
	time.Sleep(quiet) // every SUBACK in
	for _, d := range devs {
		d.drop()
	}
	time.Sleep(quiet) // every session persisted
	topicOf := func(n int) string { return "f02/t/" + strconv.Itoa(n%5) }
	next := 0
	publish := func(n int) { next = fleetPublish(t, s.Addr, "f02-pub", topicOf, next, n) }
	publish(200)
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	publish(100)

	deadline := time.Now().Add(waitFor)
	for _, d := range devs {
		if !d.dial(t, s.Addr, false) {
			t.Fatalf("%s: session not present on reconnect", d.id)
		}
		if d == devs[0] {
			for len(d.took()) < next && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	time.Sleep(quiet)

	count := map[int]int{}
	for i, d := range devs {
		got := d.took()
		if i == 0 && len(got) != next {
			t.Fatalf("%s, the first member back, took %d of the %d queued messages", d.id, len(got), next)
		}
		if i > 0 && len(got) != 0 {
			t.Fatalf("%s took %d messages after the first member back emptied the queue", d.id, len(got))
		}
		type stream struct {
			qos   int
			topic string
		}
		last := map[stream]int{}
		for _, g := range got {
			count[g.n]++
			k := stream{g.n % 2, topicOf(g.n)}
			if g.n < last[k] {
				t.Fatalf("%s: message %d after %d: publication order broken", d.id, g.n, last[k]-1)
			}
			last[k] = g.n + 1
		}
	}
	for n := range next {
		if count[n] != 1 {
			t.Fatalf("message %d delivered %d times to the group, want once", n, count[n])
		}
	}
	t.Logf("%d messages kept for a group of %d offline members across a restart, each delivered once", next, members)
}
