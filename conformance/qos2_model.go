package conformance

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/internal/prop"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// Q20: random QoS 2 packet sequences from one client against a reference
// model, on two broker nodes sharing the store.
//
// The model is the MQTT receiver state machine of the semantics note
// (docs/semantics.md, section 3.2) with the broker's durable state: per
// packet id the staged slot (the first accepted bytes, or empty) is durable,
// and the connection's exchange map (pending, released) is volatile. A
// PUBLISH gets a PUBREC and stages its bytes only when the slot is empty and
// the id is not pending on this connection; a PUBREL of a staged id delivers
// the slot's bytes, empties it and marks the id released; a PUBREL of a
// released id gets a plain PUBCOMP; one of an id neither released here nor
// staged gets PUBCOMP 0x92 (5.0). The release is one atomic commit, so
// "delivered" and "slot emptied" are the same event: the model needs no
// separate watermark.
//
// Sequences draw bursts of PUBLISH (random bytes, random DUP, ids 1..4 to
// force reuse) and PUBREL, sent without reading; abrupt drops in the
// middle of a burst (the outcome is then read back from the store: it
// must be the model's state after some prefix of the burst); reconnects
// to either node; takeovers by a second connection on either node; clean
// starts; random delays of the stage and release commits as the pipeline
// sees them. Invariants: every response matches the model, in packet
// order; each publication is delivered exactly once to the QoS 1
// subscriber, with its first accepted bytes, in release order, and at
// most once to the QoS 0 subscriber. Broker kills are Q06's and Q07's
// (a process kill per sequence would cost seconds); the note's 5,000
// sequences are 100 here (prop.Check's default; TIDEMARK_PROP_CHECKS
// raises it).

type q20op struct {
	publish bool
	pi      uint16
	payload string
	dup     bool
}

type q20model struct {
	slot      map[uint16]string
	pending   map[uint16]bool
	released  map[uint16]bool
	delivered []string
}

func newQ20Model() *q20model {
	return &q20model{slot: map[uint16]string{}, pending: map[uint16]bool{}, released: map[uint16]bool{}}
}

func (m *q20model) clone() *q20model {
	return &q20model{slot: maps.Clone(m.slot), pending: maps.Clone(m.pending), released: maps.Clone(m.released),
		delivered: slices.Clone(m.delivered)}
}

// newConn forgets the connection's volatile state.
func (m *q20model) newConn() {
	m.pending, m.released = map[uint16]bool{}, map[uint16]bool{}
}

// apply applies op and returns the response the broker owes.
func (m *q20model) apply(op q20op, v packet.Version) ack {
	pi := op.pi
	if op.publish {
		if !m.pending[pi] {
			delete(m.released, pi)
			if m.slot[pi] == "" {
				m.slot[pi] = op.payload
			}
			m.pending[pi] = true
		}
		return ack{Type: packet.TypePubrec, PacketID: pi}
	}
	switch {
	case m.released[pi]:
	case m.slot[pi] != "":
		m.delivered = append(m.delivered, m.slot[pi])
		delete(m.slot, pi)
		delete(m.pending, pi)
		m.released[pi] = true
	default:
		delete(m.pending, pi)
		if v == packet.V5 {
			return ack{Type: packet.TypePubcomp, PacketID: pi | 0x8000} // 0x92: see matches
		}
	}
	return ack{Type: packet.TypePubcomp, PacketID: pi}
}

// matches checks a response against the model's; the 0x8000 bit of the
// expected id means reason 0x92.
func ackMatches(a ack, p packet.Packet) bool {
	rc := packet.Success
	if a.PacketID&0x8000 != 0 {
		rc = packet.PacketIdentifierNotFound
	}
	return p.Type() == a.Type && mqtttest.PacketID(p) == a.PacketID&0x7fff && mqtttest.ReasonOf(p) == rc
}

func (op q20op) packet() packet.Packet {
	if op.publish {
		p := pubQoS2(op.pi, "", op.payload)
		p.Dup = op.dup
		return p
	}
	return pubrel(op.pi)
}

func casePropertyRandomQoS2Sequences(t T, tg Target) {
	delays := make(chan time.Duration, 1<<14)
	delay := func() time.Duration {
		select {
		case d := <-delays:
			return d
		default:
			return 0
		}
	}
	fa, fb := newBrokerFaults(), newBrokerFaults()
	for _, f := range []*brokerFaults{fa, fb} {
		f.delayAcks(mqtt.KindStage, delay)
		f.delayAcks(mqtt.KindRelease, delay)
	}
	a := startBroker(t, tg, mqtt.Options{NodeID: "A", Hooks: fa.hooks()})
	b := secondNode(t, tg, a, mqtt.Options{NodeID: "B", Hooks: fb.hooks()})
	bAddr := b.Addr
	nodes := []string{a.Addr, bAddr}
	dbs := []*table.DB{a.DB(), b.DB}
	sub1 := newSubscriber(t, "sub-qos1", a.Addr, "q20-sub1", packet.V5, "q20/#", packet.QoS1)
	sub0 := newSubscriber(t, "sub-qos0", bAddr, "q20-sub0", packet.V311, "q20/#", packet.QoS0)
	expected := map[string][]string{} // topic -> delivered, from each sequence's model
	seq := 0
	var stats [4]int // bursts, cut bursts, reconnects, takeovers
	prop.Check(t, "Q20", func(rt *prop.T) {
		seq++
		client := fmt.Sprintf("q20-%d", seq)
		topic := "q20/" + client
		v := packet.V5
		if rt.Bool("3.1.1") {
			v = packet.V311
		}
		npub := 0
		m := newQ20Model()
		// A clean start under 5.0 keeps the new session (its expiry never
		// ends); a 3.1.1 clean session would end with its connection, so
		// 3.1.1 sequences never start clean (their client id is new).
		node := 0
		connect := func(clean bool) *rawClient {
			node = rt.IntRange(0, 1, "node")
			c := dialRaw(t, client, nodes[node], v)
			cp := mqtttest.ConnectPacket(client, v, false)
			clean = clean && v == packet.V5
			cp.CleanStart = clean
			c.Connect(cp)
			m.newConn()
			if clean {
				m.slot = map[uint16]string{}
			}
			return c
		}
		c := connect(true)
		took := func() []string {
			var out []string
			for _, d := range sub1.deliveries() {
				if d.Topic == topic {
					out = append(out, d.Payload)
				}
			}
			return out
		}
		burst := func() []q20op {
			ops := make([]q20op, rt.IntRange(1, 6, "burst"))
			for i := range ops {
				ops[i].pi = uint16(rt.IntRange(1, 4, "pi"))
				if ops[i].publish = rt.IntRange(0, 2, "op") > 0; ops[i].publish {
					npub++
					ops[i].payload = fmt.Sprintf("%s/p%d", client, npub)
					ops[i].dup = rt.IntRange(0, 3, "dup") == 0
				}
				if rt.IntRange(0, 3, "delay?") == 0 {
					delays <- time.Duration(rt.IntRange(0, 2000, "delay us")) * time.Microsecond
				}
			}
			return ops
		}
		send := func(ops []q20op) {
			var ps []packet.Packet
			for _, op := range ops {
				p := op.packet()
				if pub, ok := p.(*packet.Publish); ok {
					pub.Topic = topic
				}
				ps = append(ps, p)
			}
			c.Send(ps...)
		}
		steps := rt.IntRange(1, 5, "steps")
		for range steps {
			switch kind := rt.IntRange(0, 9, "step"); {
			case kind <= 5: // a burst, all responses read and checked
				stats[0]++
				ops := burst()
				send(ops)
				for i, op := range ops {
					want := m.apply(op, v)
					p := c.Read("response")
					if !ackMatches(want, p) {
						rt.Fatalf("response %d of %d to %+v: got %s, want %v %d (bit 15: 0x92)", i+1, len(ops), op, mqtttest.Describe(p), want.Type, want.PacketID)
					}
				}
			case kind == 6: // a burst cut off by an abrupt drop
				stats[1]++
				ops := burst()
				send(ops)
				c.Drop()
				// The node's own tables have its writes in commit order.
				m = q20Resolve(rt, t, dbs[node], client, m, ops, v, took)
				c = connect(false)
			case kind == 7: // drop and reconnect, possibly to the other node
				stats[2]++
				c.Drop()
				c = connect(rt.IntRange(0, 5, "clean") == 0)
			case kind >= 8: // a second connection takes the session over
				stats[3]++
				old := c
				c = connect(false)
				if !old.Closed(waitFor) {
					rt.Fatalf("the taken-over connection stayed open")
				}
			}
		}
		c.Disconnect()
		expected[topic] = m.delivered
		deadline := time.Now().Add(waitFor)
		for len(took()) < len(m.delivered) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if g := took(); !slices.Equal(g, m.delivered) {
			rt.Fatalf("QoS 1 subscriber took %v, the model delivered %v", g, m.delivered)
		}
	})
	t.Logf("%d sequences: %d bursts, %d cut off by a drop, %d reconnects, %d takeovers; %d messages delivered",
		seq, stats[0], stats[1], stats[2], stats[3], len(sub1.deliveries()))
	time.Sleep(quiet)
	byTopic := func(s *subscriber) map[string][]string {
		out := map[string][]string{}
		for _, d := range s.deliveries() {
			out[d.Topic] = append(out[d.Topic], d.Payload)
		}
		return out
	}
	got1, got0 := byTopic(sub1), byTopic(sub0)
	for topic, want := range expected {
		if !slices.Equal(got1[topic], want) {
			t.Fatalf("%s: QoS 1 subscriber took %v in the end, the model delivered %v", topic, got1[topic], want)
		}
		if !isSubsequence(got0[topic], want) {
			t.Fatalf("%s: QoS 0 subscriber took %v, not at most once each of %v in order", topic, got0[topic], want)
		}
	}
}

func isSubsequence(sub, of []string) bool {
	i := 0
	for _, s := range sub {
		for i < len(of) && of[i] != s {
			i++
		}
		if i == len(of) {
			return false
		}
		i++
	}
	return true
}

// q20Resolve finds what a burst cut off by a drop did: once the dropped
// connection's session is stored offline (its commits all landed before
// that write), the staged slots must equal the model's after some prefix
// of the burst; the model continues from there.
func q20Resolve(rt *prop.T, t T, db *table.DB, client string, m *q20model, ops []q20op, v packet.Version, took func() []string) *q20model {
	deadline := time.Now().Add(waitFor)
	for {
		if online, ok := sessionOnline(t, db, client); ok && !online {
			break
		}
		if time.Now().After(deadline) {
			rt.Fatalf("the dropped connection's session is still online after %v", waitFor)
		}
		time.Sleep(time.Millisecond)
	}
	actual := map[uint16]string{}
	for pi := uint16(1); pi <= 4; pi++ {
		r, err := db.Get(t.Context(), brokerStaged, stagedSlot(client, pi))
		if errors.Is(err, table.ErrNotFound) {
			continue
		}
		var msg mqtt.Message
		if err != nil || msg.UnmarshalBinary(r.Value) != nil {
			rt.Fatalf("staged slot %d: %v", pi, err)
		}
		actual[pi] = string(msg.Payload)
	}
	states := []*q20model{m.clone()}
	for _, op := range ops {
		next := states[len(states)-1].clone()
		next.apply(op, v)
		states = append(states, next)
	}
	var cands []*q20model
	for _, s := range states {
		if maps.Equal(s.slot, actual) {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		rt.Fatalf("after a dropped burst %+v the store holds %v, which no prefix of the burst gives (from %v)", ops, actual, m.slot)
	}
	// Prefixes with the same slots differ in what they released (a
	// PUBLISH and its PUBREL both in the prefix); the QoS 1 subscriber
	// tells which: it must settle on one candidate's deliveries.
	var match *q20model
	var since time.Time
	for {
		got := took()
		var now *q20model
		for _, c := range cands {
			if slices.Equal(c.delivered, got) {
				now = c
			}
		}
		switch {
		case now == nil:
			since = time.Time{}
		case now != match:
			match, since = now, time.Now()
		case now == cands[len(cands)-1] || time.Since(since) > 100*time.Millisecond:
			return match
		}
		if time.Now().After(deadline) {
			rt.Fatalf("after a dropped burst %+v the subscriber took %v, which no prefix of the burst delivers", ops, got)
		}
		time.Sleep(time.Millisecond)
	}
}
