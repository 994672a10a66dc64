package mqtt_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// A shared group whose members' sessions persist keeps the QoS 1 and 2
// messages published while none of them is online, and the first member
// back receives them, in order; QoS 0 ones are not kept, as for an
// offline session.

// publishN publishes n QoS 1 messages on topic through the broker,
// payloads prefix0..prefix(n-1).
func publishN(t *testing.T, s *mqtttest.Server, topic, prefix string, n int, qos byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range n {
		if err := s.Broker().Publish(ctx, mqtt.Message{Topic: topic, Payload: []byte(prefix + strconv.Itoa(i)), QoS: qos}); err != nil {
			t.Fatal(err)
		}
	}
}

// leaveMember connects a client with a session of expiry seconds to b
// at addr, subscribes it to filter, disconnects it, and waits until b
// has let its connection go: a message routed to a member as it leaves
// is another matter (TestSharedLeavingPersistentMemberKeepsItsMessages).
func leaveMember(t *testing.T, b *mqtt.Broker, addr, id string, expiry uint32, filter string, qos byte) {
	t.Helper()
	online := b.Stats().ConnectionsOnline
	c := connect5(t, addr, id, true, expiry)
	c.sub(filter, qos)
	c.close()
	waitFor(t, id+" gone", func() bool { return b.Stats().ConnectionsOnline == online })
}

// sharedQueued counts the messages in the shared groups' queues.
func sharedQueued(t *testing.T, db *table.DB) int {
	t.Helper()
	n := 0
	if err := db.Range(ctxT(t), "mqtt.sharedq", "", func(table.Record) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// expectPayloads checks the next messages of c are want, in order.
func expectPayloads(t *testing.T, c *client5, want ...string) {
	t.Helper()
	for i, m := range c.expect(len(want)) {
		if string(m.Payload) != want[i] {
			t.Fatalf("%s: message %d is %q, want %q (want %v)", c.ClientID(), i, m.Payload, want[i], want)
		}
	}
}

func TestSharedGroupKeepsMessagesWhileNoMemberOnline(t *testing.T) {
	s := startBroker(t)
	leaveMember(t, s.Broker(), s.Addr, "sq-m1", 3600, "$share/g/sq/#", 1)

	publishN(t, s, "sq/x", "q", 5, 1)
	publishN(t, s, "sq/x", "zero", 2, 0) // not kept
	m := connect5(t, s.Addr, "sq-m1", false, 3600)
	expectPayloads(t, m, "q0", "q1", "q2", "q3", "q4")
	m.expectNone(300 * time.Millisecond)
	if st := s.Broker().Stats(); st.SharedQueued != 5 || st.Dropped["slow"] != 0 {
		t.Fatalf("shared queued %d, dropped %v; want 5 queued, none dropped as slow", st.SharedQueued, st.Dropped)
	}

	// Online again, the member gets the group's messages directly.
	publishN(t, s, "sq/x", "live", 1, 1)
	expectPayloads(t, m, "live0")
}

// The first member back takes the whole queue; the next finds it empty.
func TestSharedQueueGoesToTheFirstMemberBack(t *testing.T) {
	s := startBroker(t)
	for _, id := range []string{"sqf-a", "sqf-b"} {
		leaveMember(t, s.Broker(), s.Addr, id, 3600, "$share/first/sqf/#", 2)
	}
	publishN(t, s, "sqf/t", "m", 6, 2)
	a := connect5(t, s.Addr, "sqf-a", false, 3600)
	expectPayloads(t, a, "m0", "m1", "m2", "m3", "m4", "m5")
	b := connect5(t, s.Addr, "sqf-b", false, 3600)
	b.expectNone(300 * time.Millisecond)
	a.expectNone(10 * time.Millisecond)
}

// The queue and the knowledge of which groups have offline members
// survive a restart of the broker.
func TestSharedQueueAcrossRestart(t *testing.T) {
	s := startBroker(t)
	leaveMember(t, s.Broker(), s.Addr, "sqr-m", 3600, "$share/r/sqr/#", 1)
	publishN(t, s, "sqr/t", "before", 2, 1)
	restart(t, s)
	publishN(t, s, "sqr/t", "after", 2, 1)
	m := connect5(t, s.Addr, "sqr-m", false, 3600)
	expectPayloads(t, m, "before0", "before1", "after0", "after1")
	m.expectNone(300 * time.Millisecond)
}

// A group whose only member's session ended with its connection keeps
// nothing; nor does one whose member unsubscribed before going.
func TestSharedQueueOnlyForPersistentMembers(t *testing.T) {
	s := startBroker(t)
	leaveMember(t, s.Broker(), s.Addr, "sqn-clean", 0, "$share/n/sqn/#", 1)
	u := connect5(t, s.Addr, "sqn-unsub", true, 3600)
	u.sub("$share/u/sqn/#", 1)
	if _, err := u.Unsubscribe(ctxT(t), &paho.Unsubscribe{Topics: []string{"$share/u/sqn/#"}}); err != nil {
		t.Fatal(err)
	}
	u.close()
	publishN(t, s, "sqn/t", "m", 3, 1)
	c := connect5(t, s.Addr, "sqn-clean", true, 0)
	c.sub("$share/n/sqn/#", 1)
	u = connect5(t, s.Addr, "sqn-unsub", false, 3600)
	u.sub("$share/u/sqn/#", 1)
	c.expectNone(300 * time.Millisecond)
	u.expectNone(10 * time.Millisecond)
	if st := s.Broker().Stats(); st.SharedQueued != 0 {
		t.Fatalf("shared queued %d, want 0", st.SharedQueued)
	}
}

// What a persistent member held unsent when it left, with no other member
// online, waits in the group's queue instead of being dropped.
func TestSharedLeavingPersistentMemberKeepsItsMessages(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("sql-slow", true, 3600)
	cp.Properties.SetReceiveMaximum(1)
	slow, _ := connectRaw(t, s.Addr, cp)
	slow.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "$share/lv/sql/#", QoS: 1}}})
	slow.Expect(packet.TypeSuback, 1)
	const n = 5
	publishN(t, s, "sql/x", "m", n, 1)
	slow.ReadPublish() // and never acknowledged; the rest wait for the window
	slow.Conn().Close()

	// The one it had been sent and not acknowledged goes again (at least
	// once), in its place in the log.
	m := connect5(t, s.Addr, "sql-slow", false, 3600)
	expectPayloads(t, m, "m0", "m1", "m2", "m3", "m4")
	m.expectNone(300 * time.Millisecond)
	if st := s.Broker().Stats(); st.Dropped["no_member"] != 0 {
		t.Fatalf("dropped %v, want none for no_member", st.Dropped)
	}
}

// On nodes sharing a store every node that sees no member online queues
// the message, under the same id, so the group's queue holds it once; a
// member coming back on another node than the one it left takes it.
func TestSharedQueueAcrossNodes(t *testing.T) {
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID = "A" })
	leaveMember(t, a.Broker(), a.Addr, "sqn-m", 3600, "$share/nodes/sqx/#", 1)
	bAddr, b := serveNode(t, a.DB(), mqtt.Options{NodeID: "B"}) // knows the member from the store
	pub := connect5(t, bAddr, "sqn-pub", true, 0)
	for i := range 6 {
		pub.pub("sqx/t", 1, false, "m"+strconv.Itoa(i))
	}
	waitFor(t, "the group's queue to hold the 6", func() bool {
		return sharedQueued(t, a.DB()) == 6 && a.Broker().Stats().SharedQueued+b.Stats().SharedQueued == 6
	})
	m := connect5(t, bAddr, "sqn-m", false, 3600)
	expectPayloads(t, m, "m0", "m1", "m2", "m3", "m4", "m5")
	m.expectNone(300 * time.Millisecond)
}

// When the last member's session expires, the group's queue goes with
// it at the next retention pass, its messages counted as dropped for
// want of a member, and the group keeps nothing more.
func TestSharedQueueDroppedWithTheLastMember(t *testing.T) {
	s := startBroker(t)
	leaveMember(t, s.Broker(), s.Addr, "sqe-m", 60, "$share/gone/sqe/#", 1)
	publishN(t, s, "sqe/t", "m", 3, 1)
	queued := func() int { return sharedQueued(t, s.DB()) }
	waitFor(t, "3 queued", func() bool { return queued() == 3 })
	if err := s.Broker().ExpireSessionsAt(ctxT(t), time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	retainOnce(t, s)
	if n := queued(); n != 0 {
		t.Fatalf("%d messages left in the queue of a group with no member", n)
	}
	if d := s.Broker().Stats().Dropped["no_member"]; d != 3 {
		t.Fatalf("%d messages counted as dropped with the group's queue, want 3", d)
	}
	publishN(t, s, "sqe/t", "late", 2, 1)
	time.Sleep(100 * time.Millisecond)
	if n, st := queued(), s.Broker().Stats(); n != 0 || st.SharedQueued != 3 {
		t.Fatalf("after the group lost its members: %d queued, %d counted; want 0 and 3", n, st.SharedQueued)
	}
}
