package conformance

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

func init() {
	register("fleet",
		Case{Name: "F01_routing_many_sessions_wildcards_shared_groups", Run: caseFleetRouting},
		Case{Name: "F02_shared_group_queue_while_no_member_online", Run: caseFleetSharedQueue},
	)
}

// fleetSize is how many persistent sessions the fleet cases hold.
const fleetSize = 1000

// fleetDevice is one persistent session of a fleet: a lean client that
// acknowledges as a compliant one (PUBACK; PUBREC, then PUBCOMP on PUBREL)
// from its read goroutine and records what it took. QoS 2 messages are
// taken on their first PUBLISH; the packet id stays pending until PUBREL,
// across reconnects, so a re-sent PUBLISH is not taken twice.
type fleetDevice struct {
	id      string
	v       packet.Version
	subs    []packet.Subscription
	filters []string // plain filters, for the expected deliveries
	group   string   // the shared filter's group, if any

	mu      sync.Mutex
	nc      net.Conn
	conn    int
	got     []fleetTook
	pending map[uint16]bool
	done    chan struct{}
}

type fleetTook struct {
	n    int // the message's number
	qos  packet.QoS
	conn int
}

func (d *fleetDevice) dial(t T, addr string, clean bool) bool {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: dial: %v", d.id, err)
	}
	cp := mqtttest.ConnectPacket(d.id, d.v, false)
	// A fresh persistent session: 5.0 starts clean with an expiry that
	// never ends; 3.1.1 has only clean=false.
	cp.CleanStart = clean && d.v == packet.V5
	b, err := cp.Append(nil, d.v)
	if err != nil {
		t.Fatalf("%s: encode CONNECT: %v", d.id, err)
	}
	if _, err := nc.Write(b); err != nil {
		t.Fatalf("%s: send CONNECT: %v", d.id, err)
	}
	rd := packet.NewReader(nc, packet.MaxPacketSize)
	rd.SetVersion(d.v)
	_ = nc.SetReadDeadline(time.Now().Add(waitFor))
	p, err := rd.ReadPacket()
	if err != nil {
		t.Fatalf("%s: read CONNACK: %v", d.id, err)
	}
	ack, ok := p.(*packet.Connack)
	if !ok || ack.ReasonCode.IsError() {
		t.Fatalf("%s: got %s, want an accepting CONNACK", d.id, mqtttest.Describe(p))
	}
	_ = nc.SetReadDeadline(time.Time{})
	d.mu.Lock()
	d.nc, d.done = nc, make(chan struct{})
	d.conn++
	conn, done := d.conn, d.done
	d.mu.Unlock()
	go d.read(rd, nc, conn, done)
	return ack.SessionPresent
}

func (d *fleetDevice) send(p packet.Packet) error {
	b, err := p.Append(nil, d.v)
	if err != nil {
		return err
	}
	d.mu.Lock()
	nc := d.nc
	d.mu.Unlock()
	_, err = nc.Write(b)
	return err
}

func (d *fleetDevice) read(rd *packet.Reader, nc net.Conn, conn int, done chan struct{}) {
	defer close(done)
	for {
		p, err := rd.ReadPacket()
		if err != nil {
			return
		}
		var reply packet.Packet
		switch p := p.(type) {
		case *packet.Publish:
			n, _ := strconv.Atoi(string(p.Payload))
			d.mu.Lock()
			take := p.QoS != packet.QoS2 || !d.pending[p.PacketID]
			if p.QoS == packet.QoS2 {
				d.pending[p.PacketID] = true
			}
			if take {
				d.got = append(d.got, fleetTook{n: n, qos: p.QoS, conn: conn})
			}
			d.mu.Unlock()
			switch p.QoS {
			case packet.QoS1:
				reply = &packet.Puback{PacketID: p.PacketID}
			case packet.QoS2:
				reply = &packet.Pubrec{PacketID: p.PacketID}
			}
			p.Release()
		case *packet.Pubrel:
			d.mu.Lock()
			delete(d.pending, p.PacketID)
			d.mu.Unlock()
			reply = &packet.Pubcomp{PacketID: p.PacketID}
		case *packet.Suback:
			reply = nil
		}
		if reply != nil {
			b, err := reply.Append(nil, d.v)
			if err == nil {
				_, err = nc.Write(b)
			}
			if err != nil {
				return
			}
		}
	}
}

func (d *fleetDevice) drop() {
	d.mu.Lock()
	nc, done := d.nc, d.done
	d.mu.Unlock()
	_ = nc.Close()
	<-done
}

func (d *fleetDevice) took() []fleetTook {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]fleetTook(nil), d.got...)
}

// fleetPublish publishes messages from, from+1, ... (n of them), message
// k on topicOf(k) with payload k, odd ones at QoS 2, from one 3.1.1
// connection of client in bursts of up to 20: the acknowledgements come
// in packet order, then the releases. It returns from+n.
func fleetPublish(t T, addr, client string, topicOf func(int) string, from, n int) int {
	pub, _ := connectRaw(t, "pub", addr, client, packet.V311, true)
	next := from
	for n > 0 {
		k := min(20, n)
		var burst, rels []packet.Packet
		var want, comps []ack
		for i := range k {
			pi := uint16(1 + i)
			payload := strconv.Itoa(next)
			if next%2 == 0 {
				burst = append(burst, pubQoS1(pi, topicOf(next), payload))
				want = append(want, ack{Type: packet.TypePuback, PacketID: pi})
			} else {
				burst = append(burst, pubQoS2(pi, topicOf(next), payload))
				want = append(want, ack{Type: packet.TypePubrec, PacketID: pi})
				rels = append(rels, pubrel(pi))
				comps = append(comps, ack{Type: packet.TypePubcomp, PacketID: pi})
			}
			next++
		}
		pub.Send(burst...)
		pub.ExpectSeq(want...)
		pub.Send(rels...)
		pub.ExpectSeq(comps...)
		n -= k
	}
	pub.Disconnect()
	return next
}

// fleetTopic is the topic of message n: device topics and group topics.
func fleetTopic(n int) string {
	if n%3 == 0 {
		return fmt.Sprintf("fleet/grp/%d/x", n%10)
	}
	return fmt.Sprintf("fleet/dev/%d", n%fleetSize)
}

// caseFleetRouting (F01): a fleet of persistent sessions, each with its own device
// topic, some with overlapping wildcard filters (+ and #) and some in a
// shared group, half 3.1.1 and half 5.0, QoS 1 and 2. Messages are
// published while all are online, while a quarter of them are offline,
// and after those reconnect. Every session must get exactly the messages
// its filters match (one delivery for overlapping filters), in
// publication order per connection, topic and QoS, nothing lost, no QoS 2 duplicate,
// and QoS 1 duplicates only after a drop; each shared-group message goes
// to exactly one member of the group.
func caseFleetRouting(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{RouteQueue: 64})
	devs := make([]*fleetDevice, fleetSize)
	for i := range devs {
		d := &fleetDevice{id: fmt.Sprintf("f01-%04d", i), v: packet.V311, pending: map[uint16]bool{}}
		if i%2 == 0 {
			d.v = packet.V5
		}
		add := func(f string, q packet.QoS) {
			d.subs = append(d.subs, packet.Subscription{Filter: f, QoS: q})
			d.filters = append(d.filters, f)
		}
		add(fmt.Sprintf("fleet/dev/%d", i), packet.QoS(1+i%2))
		if i%250 == 0 {
			add("fleet/#", packet.QoS1)
		}
		if i%50 == 3 {
			add("fleet/grp/+/x", packet.QoS2)
		}
		if i%20 == 5 {
			d.group = "g1"
			d.subs = append(d.subs, packet.Subscription{Filter: "$share/g1/fleet/grp/#", QoS: packet.QoS1})
		}
		devs[i] = d
	}
	// Connect the fleet, 32 at a time.
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, d := range devs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.dial(t, s.Addr, true)
			if err := d.send(&packet.Subscribe{PacketID: 1, Subscriptions: d.subs}); err != nil {
				t.Errorf("%s: subscribe: %v", d.id, err)
			}
		}()
	}
	wg.Wait()
	t.Logf("fleet connected in %v", time.Since(start))
	time.Sleep(quiet) // every SUBACK in
	const per = fleetSize
	next := 0
	publish := func(n int) { next = fleetPublish(t, s.Addr, "f01-pub", fleetTopic, next, n) }
	publish(per)
	dropped := func(i int) bool { return i%4 == 1 && devs[i].group == "" }
	for i, d := range devs {
		if dropped(i) {
			d.drop()
		}
	}
	publish(per)
	for i, d := range devs {
		if dropped(i) {
			if !d.dial(t, s.Addr, false) {
				t.Fatalf("%s: session not present on reconnect", d.id)
			}
		}
	}
	publish(per)
	t.Logf("published %d messages in three rounds in %v", next, time.Since(start))

	// What each device must get, and the shared group's messages.
	want := make([][]int, len(devs))
	var groupMsgs []int
	for n := range next {
		tp := fleetTopic(n)
		if topic.Match("fleet/grp/#", tp) {
			groupMsgs = append(groupMsgs, n)
		}
		for i, d := range devs {
			for _, f := range d.filters {
				if topic.Match(f, tp) {
					want[i] = append(want[i], n)
					break
				}
			}
		}
	}
	deadline := time.Now().Add(2 * waitFor)
	complete := func(i int) bool {
		seen := map[int]bool{}
		for _, g := range devs[i].took() {
			seen[g.n] = true
		}
		for _, n := range want[i] {
			if !seen[n] {
				return false
			}
		}
		return true
	}
	for i := range devs {
		for !complete(i) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(quiet)

	shared := map[int]int{}
	deliveries, dups := 0, 0
	for i, d := range devs {
		got := d.took()
		deliveries += len(got)
		count := map[int]int{}
		// The order that counts is per topic and QoS [MQTT-4.6.0-6]: a
		// QoS 2 message enters the log at its PUBREL, after QoS 1
		// messages published later.
		type stream struct {
			conn, qos int
			topic     string
		}
		last := map[stream]int{} // last message number taken, plus one
		wanted := map[int]bool{}
		for _, n := range want[i] {
			wanted[n] = true
		}
		for _, g := range got {
			if !wanted[g.n] {
				if d.group != "" && topic.Match("fleet/grp/#", fleetTopic(g.n)) {
					shared[g.n]++
					continue
				}
				t.Fatalf("%s: took message %d (%s), which none of its filters %v match", d.id, g.n, fleetTopic(g.n), d.filters)
			}
			count[g.n]++
			if count[g.n] > 1 {
				dups++
				if g.qos == packet.QoS2 || !dropped(i) {
					t.Fatalf("%s: message %d (QoS %d) taken %d times", d.id, g.n, g.qos, count[g.n])
				}
			}
			k := stream{g.conn, g.n % 2, fleetTopic(g.n)}
			if g.n < last[k] && count[g.n] == 1 {
				t.Fatalf("%s: message %d after %d on connection %d: publication order broken", d.id, g.n, last[k]-1, g.conn)
			}
			last[k] = max(last[k], g.n+1)
		}
		for _, n := range want[i] {
			if count[n] == 0 {
				t.Fatalf("%s: message %d (%s) never delivered; took %d of %d", d.id, n, fleetTopic(n), len(count), len(want[i]))
			}
		}
	}
	for _, n := range groupMsgs {
		if shared[n] != 1 {
			t.Fatalf("shared group message %d delivered to %d members, want 1", n, shared[n])
		}
	}
	t.Logf("%d sessions, %d messages, %d deliveries, %d QoS 1 duplicates after drops", len(devs), next, deliveries, dups)
}
