package conformance

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// The session suite: end-to-end durable sessions, M01..M05 of the semantics
// note (docs/semantics.md, section 4), through real MQTT connections: the
// proof the table layer's resume cursor carries through the broker's save
// and resume, across restarts and kills.
func init() {
	register("session",
		Case{Name: "M01_qos1_resume_through_save_and_resume", Run: caseQoS1ResumeThroughSaveAndResume},
		Case{Name: "M02_kill_mid_replay", Run: caseSessionKillMidReplay},
		Case{Name: "M03_subscribe_second_topic_mid_replay", Run: caseSubscribeSecondTopicMidReplay},
		Case{Name: "M04_duplicate_client_id_on_two_nodes", Run: caseDuplicateClientIDOnTwoNodes},
		Case{Name: "M05_offline_messages_for_qos0_subscription", Run: caseOfflineMessagesForQoS0Subscription},
	)
}

// publishRecords publishes n QoS 1 records over 20 ids as pipelined
// bursts of random size (1..50, the MQTT counterpart of transactions of
// random size: each burst's commits group), and returns the payloads in
// publication order. Payload "sID:SEQ" is the SEQ-th record of id sID,
// on topic prefix/sID.
func publishRecords(t T, addr, client, prefix string, n int, rng *rand.Rand) []string {
	t.Helper()
	pub, _ := connectRaw(t, "pub", addr, client, packet.V311, true)
	seq := map[int]int{}
	var out []string
	for len(out) < n {
		k := min(1+rng.IntN(50), n-len(out))
		var burst []packet.Packet
		for i := 1; i <= k; i++ {
			id := rng.IntN(20)
			seq[id]++
			p := fmt.Sprintf("s%02d:%05d", id, seq[id])
			out = append(out, p)
			burst = append(burst, pubQoS1(uint16(i), fmt.Sprintf("%s/s%02d", prefix, id), p))
		}
		pub.Send(burst...)
		pub.ExpectSeq(acks(packet.TypePuback, 1, k)...)
	}
	pub.Disconnect()
	return out
}

// checkResumed checks a persistent QoS 1 subscriber's deliveries against
// the records published: every record at least once; per id, each
// connection's stream in publication order; at most maxDups duplicates,
// each a second copy of a record first taken on a connection that dupOn
// accepts (one that ended before acknowledging everything it took).
func checkResumed(t T, want []string, got []delivery, maxDups int, dupOn func(conn int) bool) {
	t.Helper()
	first := map[string]int{}
	count := map[string]int{}
	last := map[string]int{} // conn/id -> last seq
	dups := 0
	for _, d := range got {
		id, seqText, ok := strings.Cut(d.Payload, ":")
		seq, err := strconv.Atoi(seqText)
		if !ok || err != nil {
			t.Fatalf("unexpected payload %q", d.Payload)
		}
		k := fmt.Sprintf("%d/%s", d.Conn, id)
		if seq <= last[k] {
			t.Fatalf("connection %d delivered %s after %s:%05d: per-id order broken", d.Conn, d.Payload, id, last[k])
		}
		last[k] = seq
		count[d.Payload]++
		if count[d.Payload] == 1 {
			first[d.Payload] = d.Conn
			continue
		}
		dups++
		if count[d.Payload] > 2 || !dupOn(first[d.Payload]) {
			t.Fatalf("%s delivered %d times, first on connection %d", d.Payload, count[d.Payload], first[d.Payload])
		}
	}
	for _, w := range want {
		if count[w] == 0 {
			t.Fatalf("record %s never delivered (%d delivered, %d published)", w, len(count), len(want))
		}
	}
	if dups > maxDups {
		t.Fatalf("%d duplicates, want at most %d", dups, maxDups)
	}
	t.Logf("%d records, %d deliveries, %d duplicates", len(want), len(got), dups)
}

// caseQoS1ResumeThroughSaveAndResume (M01): a wildcard QoS 1 subscriber of a
// persistent session drops at a random point while 2,000 records are
// published; the broker restarts; the subscriber resumes. With a Receive
// Maximum of 100 and every delivery acknowledged at once, the duplicates are
// at most the 100 that may have been unacknowledged at the drop.
func caseQoS1ResumeThroughSaveAndResume(t T, tg Target) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	s := startBroker(t, tg, mqtt.Options{})
	sub := newSubscriberWith(t, "sub", s.Addr, "m01-sub", packet.V5, "m01/#", packet.QoS1, 100)
	dropAt := 200 + rng.IntN(1600)
	dropped := make(chan struct{})
	go func() {
		defer close(dropped)
		deadline := time.Now().Add(2 * waitFor)
		for len(sub.deliveries()) < dropAt && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		sub.drop()
	}()
	want := publishRecords(t, s.Addr, "m01-pub", "m01", 2000, rng)
	<-dropped
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	sub.reconnect(s.Addr)
	sub.waitTook(want...)
	time.Sleep(quiet)
	checkResumed(t, want, sub.deliveries(), 100, func(conn int) bool { return conn == 1 })
}

// caseSessionKillMidReplay (M02): as M01, but the broker runs in a child
// process that kills itself in the middle of the replay to the resumed
// session (at a random delivery); a new broker on the same store serves the
// next resume. What the killed broker delivered may come again (its
// checkpoint is persisted every 100 ms), nothing may be lost.
func caseSessionKillMidReplay(t T, tg Target) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)
	dir := t.TempDir()
	b := startBrokerChild(t, tg, dir, brokerArgs{})
	sub := newSubscriberWith(t, "sub", b.Addr, "m02-sub", packet.V5, "m02/#", packet.QoS1, 100)
	sub.mu.Lock()
	c := sub.c
	sub.mu.Unlock()
	c.Disconnect()
	want := publishRecords(t, b.Addr, "m02-pub", "m02", 2000, rng)
	b.kill()
	killAt := 200 + rng.IntN(1600)
	b = b.restart(tg, brokerArgs{Kill: mqtt.PointDelivered, KillClient: "m02-sub", KillNth: killAt})
	sub.reconnect(b.Addr)
	b.waitKilledItself()
	sub.drop()
	firstRun := len(sub.deliveries())
	b = b.restart(tg, brokerArgs{})
	sub.reconnect(b.Addr)
	sub.waitTook(want...)
	time.Sleep(quiet)
	t.Logf("killed at delivery %d; the killed broker's connection took %d", killAt, firstRun)
	checkResumed(t, want, sub.deliveries(), firstRun, func(conn int) bool { return conn == 2 })
}

// caseSubscribeSecondTopicMidReplay (M03): a resumed QoS 1 session (Receive
// Maximum 10) takes 10 queued messages, acknowledges 5 and subscribes to a
// second topic, which persists the session; the broker is killed right after
// the SUBACK. The persisted checkpoint is the acknowledged frontier: after a
// restart the 195 unacknowledged messages all come, the first five do not,
// and the second subscription is there.
func caseSubscribeSecondTopicMidReplay(t T, tg Target) {
	dir := t.TempDir()
	b := startBrokerChild(t, tg, dir, brokerArgs{})
	conn := func() *rawClient {
		c := dialRaw(t, "sub", b.Addr, packet.V5)
		cp := mqtttest.ConnectPacket("m03-sub", packet.V5, false)
		cp.Properties.SetReceiveMaximum(10)
		c.Connect(cp)
		return c
	}
	c := conn()
	c.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "m03/a/#", QoS: packet.QoS1}}})
	c.Expect(packet.TypeSuback, 1)
	c.Disconnect()
	pub, _ := connectRaw(t, "pub", b.Addr, "m03-pub", packet.V311, true)
	var burst []packet.Packet
	for i := 1; i <= 200; i++ {
		burst = append(burst, pubQoS1(uint16(i), "m03/a/x", fmt.Sprintf("m%d", i)))
	}
	pub.Send(burst...)
	pub.ExpectSeq(acks(packet.TypePuback, 1, 200)...)
	pub.Disconnect()

	c = conn()
	var got []*packet.Publish
	for len(got) < 10 {
		got = append(got, c.Expect(packet.TypePublish, 0).(*packet.Publish))
	}
	for i, p := range got {
		if string(p.Payload) != fmt.Sprintf("m%d", i+1) {
			t.Fatalf("replay delivery %d is %s", i+1, mqtttest.Describe(p))
		}
	}
	for _, p := range got[:5] {
		c.Send(&packet.Puback{PacketID: p.PacketID})
	}
	c.Send(&packet.Subscribe{PacketID: 2, Subscriptions: []packet.Subscription{{Filter: "m03/b/#", QoS: packet.QoS1}}})
	for {
		p := c.Read("SUBACK")
		if p.Type() == packet.TypeSuback {
			break
		}
		if p.Type() != packet.TypePublish {
			t.Fatalf("got %s while waiting for the SUBACK", mqtttest.Describe(p))
		}
	}
	b.kill()

	b = b.restart(tg, brokerArgs{})
	c = conn()
	seen := map[string]bool{}
	for len(seen) < 195 {
		p := c.Expect(packet.TypePublish, 0).(*packet.Publish)
		n, _ := strconv.Atoi(strings.TrimPrefix(string(p.Payload), "m"))
		if n <= 5 {
			t.Fatalf("acknowledged m%d delivered again: the checkpoint went back", n)
		}
		seen[string(p.Payload)] = true
		c.Send(&packet.Puback{PacketID: p.PacketID})
	}
	pub, _ = connectRaw(t, "pub", b.Addr, "m03-pub", packet.V311, true)
	pub.Send(pubQoS1(1, "m03/b/x", "second-topic"))
	pub.Expect(packet.TypePuback, 1)
	p := c.Expect(packet.TypePublish, 0).(*packet.Publish)
	if string(p.Payload) != "second-topic" {
		t.Fatalf("got %s, want the message on the second subscription", mqtttest.Describe(p))
	}
}

// sessionRecordOf reads the broker's session record of client.
func sessionRecordOf(t T, db *table.DB, client string) mqtt.SessionInfo {
	t.Helper()
	si, ok, err := mqtt.SessionOf(t.Context(), db, client)
	if err != nil || !ok {
		t.Fatalf("session record of %s: found %v, %v", client, ok, err)
	}
	return si
}

func willPayload(m *mqtt.Message) string {
	if m == nil {
		return ""
	}
	return string(m.Payload)
}

// caseDuplicateClientIDOnTwoNodes (M04): client C on node A, then C again on
// node B without a DISCONNECT (Harper #1604). A closes its connection (0x8E)
// and publishes A's will (delay 0, as on a takeover on one node); the
// session record is B's, with B's will; A's keepalive lapsing later changes
// nothing: no will of B, no second will of A, no write to the session. A
// third node starting on the store meanwhile leaves B's live session alone.
func caseDuplicateClientIDOnTwoNodes(t T, tg Target) {
	a := startBroker(t, tg, mqtt.Options{NodeID: "A"})
	bAddr := secondNode(t, tg, a, mqtt.Options{NodeID: "B"}).Addr
	watch := newSubscriber(t, "watch", bAddr, "m04-watch", packet.V311, "m04/will/#", packet.QoS1)
	connectWith := func(addr, will string, keepAlive uint16) *rawClient {
		c := dialRaw(t, "C@"+will, addr, packet.V5)
		cp := mqtttest.ConnectPacket("m04-c", packet.V5, false)
		cp.KeepAlive = keepAlive
		cp.Will = &packet.Will{Topic: "m04/will/" + will, Payload: []byte(will), QoS: packet.QoS1}
		c.Connect(cp)
		return c
	}
	ca := connectWith(a.Addr, "will-A", 1)
	ca.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "m04/data", QoS: packet.QoS1}}})
	ca.Expect(packet.TypeSuback, 1)
	cb := connectWith(bAddr, "will-B", 60)
	if !ca.Closed(waitFor) {
		t.Fatalf("A kept the connection after C connected on B")
	}
	if ps := ca.Drain(); len(ps) != 1 || mqtttest.ReasonOf(ps[0]) != packet.SessionTakenOver {
		t.Fatalf("A's connection got %v, want DISCONNECT 0x8E", ps)
	}
	watch.waitTook("will-A")
	// A reads the store through its own view of the shared stream, which
	// follows B's commits a moment later: A's hand-over write (will none,
	// node B) may still be what it sees.
	rec := sessionRecordOf(t, a.DB(), "m04-c")
	eventually(t, "the session record on B with will-B, as node A sees it", func() bool {
		rec = sessionRecordOf(t, a.DB(), "m04-c")
		return rec.Online && rec.Node == "B" && willPayload(rec.Will) == "will-B"
	})

	// A third node starting now recovers only its own node's sessions.
	secondNode(t, tg, a, mqtt.Options{NodeID: "C"})
	// Past A's keepalive (1 s) times the grace (1.5).
	time.Sleep(2 * time.Second)
	watch.expectExactly("will-A")
	// B's own checkpoint writes may rewrite the record; it must stay B's.
	rec2 := sessionRecordOf(t, a.DB(), "m04-c")
	if !rec2.Online || rec2.Node != "B" || rec2.Conn != rec.Conn || willPayload(rec2.Will) != "will-B" {
		t.Fatalf("session record after A's keepalive lapsed: online %v node %q conn %q (was %q) will %v", rec2.Online, rec2.Node, rec2.Conn, rec.Conn, rec2.Will)
	}
	// The session (with A's subscription) is B's.
	pub, _ := connectRaw(t, "pub", a.Addr, "m04-pub", packet.V311, true)
	pub.Send(pubQoS1(1, "m04/data", "to-B"))
	pub.Expect(packet.TypePuback, 1)
	if p := cb.Expect(packet.TypePublish, 0).(*packet.Publish); string(p.Payload) != "to-B" {
		t.Fatalf("B's connection got %s", mqtttest.Describe(p))
	}
}

// caseOfflineMessagesForQoS0Subscription (M05): the documented rule (package
// mqtt): QoS 0 subscriptions of persistent sessions do not queue messages
// while offline; the same setup at QoS 1 does receive them (NATS #4849).
func caseOfflineMessagesForQoS0Subscription(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{})
	q0 := newSubscriber(t, "sub-qos0", s.Addr, "m05-q0", packet.V5, "m05/#", packet.QoS0)
	q1 := newSubscriber(t, "sub-qos1", s.Addr, "m05-q1", packet.V311, "m05/#", packet.QoS1)
	q0.drop()
	q1.drop()
	pub, _ := connectRaw(t, "pub", s.Addr, "m05-pub", packet.V5, true)
	pub.Send(pubQoS1(1, "m05/x", "offline-qos1"))
	pub.Expect(packet.TypePuback, 1)
	exchange(pub, 2, "m05/x", "offline-qos2")
	pub.Send(&packet.Publish{Topic: "m05/x", Payload: []byte("offline-qos0")})
	// The broker handles a connection's packets in order: once this
	// PUBACK is back, the QoS 0 message was routed while q0 was offline
	// (without it, a busy machine may route it after q0 is back online,
	// where receiving it is right).
	pub.Send(pubQoS1(4, "m05-fence", "fence"))
	pub.Expect(packet.TypePuback, 4)
	q0.reconnect(s.Addr)
	q1.reconnect(s.Addr)
	q1.waitTook("offline-qos1", "offline-qos2")
	pub.Send(pubQoS1(3, "m05/x", "online"))
	pub.Expect(packet.TypePuback, 3)
	q0.expectExactly("online")
	q1.expectExactly("offline-qos1", "offline-qos2", "online")
}
