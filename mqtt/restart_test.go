package mqtt_test

// State that must outlive the broker process: persistent sessions (their
// subscriptions, queued messages and outbound in-flight exchanges) and,
// on every engine, the acknowledged QoS 1 and 2 messages an offline
// subscriber has not received yet.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"

	// Every engine built into this binary runs the restart test; pebble
	// runs the rest.
	_ "github.com/tidemark-io/tidemark/engine/badger"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

func restart(t *testing.T, s *mqtttest.Server) {
	t.Helper()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
}

// Subscriptions and queued messages of 5.0 and 3.1.1 persistent sessions
// survive a broker restart [MQTT-3.1.2-4] [MQTT-3.1.2-5] [MQTT-4.1.0-1].
func TestRestartKeepsSessions(t *testing.T) {
	s := startBroker(t)
	c5 := connect5(t, s.Addr, "rs5", false, 3600)
	c5.sub("rs/+", 2)
	c5.close()
	c3 := connect3(t, s.Addr, "rs3", false)
	c3.sub("rs/#", 1)
	c3.close()
	pub := connect5(t, s.Addr, "rs-pub", true, 0)
	pub.pub("rs/a", 1, false, "before-1")
	pub.pub("rs/a", 2, false, "before-2")
	pub.close()
	restart(t, s)

	pub = connect5(t, s.Addr, "rs-pub", true, 0)
	pub.pub("rs/a", 1, false, "after")
	c5 = connect5(t, s.Addr, "rs5", false, 3600)
	if !c5.ack.SessionPresent {
		t.Fatal("5.0 session lost in the restart")
	}
	c5.expectOne("rs/a", "before-1")
	c5.expectOne("rs/a", "before-2")
	c5.expectOne("rs/a", "after")
	c3 = connect3(t, s.Addr, "rs3", false)
	if !c3.present {
		t.Fatal("3.1.1 session lost in the restart")
	}
	c3.expectOne("rs/a", "before-1")
	c3.expectOne("rs/a", "before-2")
	c3.expectOne("rs/a", "after")
	pub.pub("rs/b", 1, false, "live")
	c5.expectOne("rs/b", "live")
	c3.expectOne("rs/b", "live")
}

// Outbound in-flight state survives a restart: an unacknowledged QoS 1
// PUBLISH and a QoS 2 PUBLISH without PUBREC are re-sent with DUP, in the
// order first sent; a QoS 2 message whose PUBREC arrived gets PUBREL
// again, never its PUBLISH; re-sent PUBLISHes keep their packet ids
// [MQTT-4.4.0-1] [MQTT-3.3.1-1] [MQTT-4.3.3-? PUBREL after PUBREC]
// [MQTT-4.6.0-6].
func TestRestartKeepsOutboundInflight(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("inf", false, 3600)
	r, _ := connectRaw(t, s.Addr, cp)
	sp := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "inf/#", QoS: 2}}}
	sp.Properties.AddSubscriptionID(5)
	r.Send(sp)
	if _, ok := r.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connect5(t, s.Addr, "inf-pub", true, 0)
	pub.pub("inf/rec", 2, false, "rec")
	for i := 0; i < 5; i++ {
		pub.pub("inf/q2", 2, false, fmt.Sprint(i))
	}
	pub.pub("inf/q1", 1, false, "q1")

	rec := r.ReadPublish()
	if string(rec.Payload) != "rec" {
		t.Fatalf("first delivery %q", rec.Payload)
	}
	r.Send(&packet.Pubrec{PacketID: rec.PacketID})
	firstIDs := map[string]uint16{}
	for rel := false; !rel || len(firstIDs) < 6; {
		switch p := r.Read("packet").(type) {
		case *packet.Pubrel:
			if p.PacketID != rec.PacketID {
				t.Fatalf("PUBREL %d, want %d", p.PacketID, rec.PacketID)
			}
			rel = true
		case *packet.Publish:
			firstIDs[string(p.Payload)] = p.PacketID
		default:
			t.Fatalf("unexpected %v", p.Type())
		}
	}
	r.Conn().Close()
	restart(t, s)

	r = dialRaw(t, s.Addr, packet.V5)
	r.Send(cp)
	if ack, ok := r.Read("packet").(*packet.Connack); !ok || !ack.SessionPresent {
		t.Fatalf("CONNACK %+v, want session present", ack)
	}
	var order []string
	gotRel := false
	for len(order) < 6 || !gotRel {
		switch p := r.Read("packet").(type) {
		case *packet.Pubrel:
			if p.PacketID != rec.PacketID {
				t.Fatalf("PUBREL for %d, want %d", p.PacketID, rec.PacketID)
			}
			gotRel = true
		case *packet.Publish:
			if string(p.Payload) == "rec" {
				t.Fatal("QoS 2 PUBLISH re-sent after its PUBREC")
			}
			if !p.Dup {
				t.Errorf("re-sent %q without DUP", p.Payload)
			}
			if !slices.Equal(p.Properties.SubscriptionIDs, []uint32{5}) {
				t.Errorf("re-sent %q with subscription ids %v, want [5]", p.Payload, p.Properties.SubscriptionIDs)
			}
			if p.PacketID != firstIDs[string(p.Payload)] {
				t.Errorf("re-sent %q with packet id %d, first sent as %d", p.Payload, p.PacketID, firstIDs[string(p.Payload)])
			}
			order = append(order, string(p.Payload))
		default:
			t.Fatalf("unexpected %v", p.Type())
		}
	}
	var q2 []string
	for _, p := range order {
		if p != "q1" {
			q2 = append(q2, p)
		}
	}
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(q2, want) {
		t.Fatalf("QoS 2 re-sent in order %v, want %v", q2, want)
	}
	r.Silence(300 * time.Millisecond)
}

// THE restart test, on every engine: a publisher's QoS 1 and 2 messages
// are acknowledged, the broker stops (cleanly, or killed with SIGKILL in
// a child process), and an offline persistent subscriber that reconnects
// after the restart gets every one of them: QoS 2 exactly once, QoS 1 at
// least once, in order per topic. Retained messages (set, replaced,
// deleted) come through the same way.
func TestRestartDeliversAcknowledged(t *testing.T) {
	for _, name := range engine.Drivers() {
		t.Run(name+"/stop", func(t *testing.T) {
			s := mqtttest.Start(t, name, nil, mqtt.Options{})
			restartDelivers(t, s.Addr, func() string { restart(t, s); return s.Addr })
		})
		t.Run(name+"/kill", func(t *testing.T) {
			dir := t.TempDir()
			child := startBrokerChild(t, name, dir, "")
			restartDelivers(t, child.Addr, func() string {
				child.kill()
				child = startBrokerChild(t, name, dir, child.Addr)
				return child.Addr
			})
		})
	}
}

func restartDelivers(t *testing.T, addr string, bounce func() string) {
	const perTopic = 25
	sub := connect5(t, addr, "rd-sub", false, 3600)
	sub.sub("rd/#", 2)
	// A subscriber of the same topics stays online across the stop; it
	// takes part of the traffic before, so the restart has live sessions
	// with a checkpoint mid-log as well as an offline one.
	// Its client keeps one session state across the reconnect, as a
	// persistent client must for QoS 2 to be exactly once end to end.
	onlineState := state.NewInMemory()
	t.Cleanup(func() { onlineState.Close() })
	withState := func(c *paho.ClientConfig) { c.Session = onlineState }
	onlineConnect := &paho.Connect{ClientID: "rd-online", KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)}}
	online, err := dial5(t, addr, onlineConnect, withState)
	if err != nil {
		t.Fatal(err)
	}
	online.sub("rd/#", 2)
	sub.close()

	pub := connect5(t, addr, "rd-pub", true, 0)
	pub.pub("rd-retained/a", 1, true, "old")
	pub.pub("rd-retained/a", 2, true, "kept")
	pub.pub("rd-retained/b", 1, true, "gone")
	pub.pub("rd-retained/b", 1, true, "")
	for i := 0; i < perTopic; i++ {
		pub.pub("rd/q1", 1, false, strconv.Itoa(i))
		pub.pub("rd/q2", 2, false, strconv.Itoa(i))
	}
	before := online.expect(perTopic) // some of it, then the stop
	addr = bounce()
	// What reached the online subscriber before the stop counts, also what
	// its handler was still working through when the connection went.
	select {
	case <-online.Done():
	case <-time.After(wait):
		t.Fatal("rd-online's client still running after the restart")
	}
	for drained := false; !drained; {
		select {
		case m := <-online.msgs:
			before = append(before, m)
		default:
			drained = true
		}
	}

	sub = connect5(t, addr, "rd-sub", false, 3600)
	if !sub.ack.SessionPresent {
		t.Fatal("session lost across the restart")
	}
	checkDelivery(t, sub, perTopic)
	online, err = dial5(t, addr, onlineConnect, withState)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivery(t, online, perTopic, before...)

	// Retained messages are durable too: the last one set, none deleted.
	fresh := connect5(t, addr, "rd-fresh", true, 0)
	fresh.sub("rd-retained/#", 2)
	if m := fresh.expectOne("rd-retained/a", "kept"); !m.Retain {
		t.Error("retained message without RETAIN after the restart")
	}
	fresh.expectNone(300 * time.Millisecond)
}

// checkDelivery collects, after the messages received before (by an
// earlier connection of the client), until every message 0..n-1 of rd/q1
// and rd/q2 arrived, then checks QoS 2 exactly once, QoS 1 at least once
// and the order per topic.
func checkDelivery(t *testing.T, c *client5, n int, before ...*paho.Publish) {
	t.Helper()
	check(t, collect(t, c.ClientID(), c.msgs, n, before...), n)
}

// collect reads until both topics reached n-1, then 300 ms more for stray
// duplicates.
func collect(t *testing.T, name string, msgs chan *paho.Publish, n int, before ...*paho.Publish) map[string][]int {
	t.Helper()
	got := map[string][]int{}
	for _, m := range before {
		v, err := strconv.Atoi(string(m.Payload))
		if err != nil {
			t.Fatalf("payload %q", m.Payload)
		}
		got[m.Topic] = append(got[m.Topic], v)
	}
	done := func() bool {
		for _, tp := range []string{"rd/q1", "rd/q2"} {
			s := got[tp]
			if len(s) == 0 || s[len(s)-1] != n-1 {
				return false
			}
		}
		return true
	}
	deadline := time.After(20 * time.Second)
	for !done() {
		select {
		case m := <-msgs:
			v, err := strconv.Atoi(string(m.Payload))
			if err != nil {
				t.Fatalf("payload %q", m.Payload)
			}
			got[m.Topic] = append(got[m.Topic], v)
		case <-deadline:
			t.Fatalf("%s: incomplete after the restart: %v", name, got)
		}
	}
	for {
		select {
		case m := <-msgs:
			v, _ := strconv.Atoi(string(m.Payload))
			got[m.Topic] = append(got[m.Topic], v)
		case <-time.After(300 * time.Millisecond):
			return got
		}
	}
}

// check verifies the sequences 0..n-1 of both topics.
func check(t *testing.T, got map[string][]int, n int) {
	t.Helper()
	for _, tp := range []string{"rd/q1", "rd/q2"} {
		s := got[tp]
		// Order per topic: never a step back except a QoS 1 re-send,
		// which restarts from an earlier message and runs on in order.
		var uniq []int
		seen := map[int]int{}
		for i, v := range s {
			seen[v]++
			if seen[v] == 1 {
				uniq = append(uniq, v)
			}
			if i > 0 && v < s[i-1] && tp == "rd/q2" {
				t.Errorf("%s out of order: %v", tp, s)
				break
			}
		}
		for i := 0; i < n; i++ {
			if seen[i] == 0 {
				t.Errorf("%s: message %d lost: %v", tp, i, s)
			}
			if tp == "rd/q2" && seen[i] > 1 {
				t.Errorf("%s: QoS 2 message %d delivered %d times: %v", tp, i, seen[i], s)
			}
		}
		if !slices.IsSorted(uniq) {
			t.Errorf("%s: first deliveries out of order: %v", tp, s)
		}
	}
}

// A broker that shuts down closes its connections without having received
// DISCONNECT, so their wills are due: 5.0 clients are told 0x8B, a will
// without delay is published before the broker stops, and a delayed one
// after the restart, unless its client is back first [MQTT-3.1.2-8]
// (3.1.2.5: "the Server closes the Network Connection without first
// receiving a DISCONNECT").
func TestShutdownPublishesWills(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	watch := connect5(t, s.Addr, "sw-watch", false, 3600)
	watch.sub("sw/#", 1)
	dialWill := func(id string, delay uint32) *client5 {
		cp := &paho.Connect{ClientID: id, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)},
			WillMessage: &paho.WillMessage{Topic: "sw/" + id, Payload: []byte("will"), QoS: 1}}
		if delay > 0 {
			cp.WillProperties = &paho.WillProperties{WillDelayInterval: u32(delay)}
		}
		c, err := dial5(t, s.Addr, cp, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	now := dialWill("now", 0)
	dialWill("later", 1)
	dialWill("back", 3)
	restart(t, s)
	if rc := now.expectDisconnect(); rc != byte(packet.ServerShuttingDown) {
		t.Fatalf("DISCONNECT %#x on shutdown, want 0x8B", rc)
	}
	connect5(t, s.Addr, "back", false, 3600) // within its will delay
	// The will without delay may reach the watcher before it is shut
	// down itself, or after the restart from its session.
	got := map[string]bool{}
	for len(watch.msgs) > 0 {
		got[(<-watch.msgs).Topic] = true
	}
	// QoS 1: a will the watcher got before the stop comes again when its
	// acknowledgement missed the stop's checkpoint.
	watch = connect5(t, s.Addr, "sw-watch", false, 3600)
	deadline := time.After(wait)
	for !got["sw/now"] || !got["sw/later"] {
		select {
		case m := <-watch.msgs:
			got[m.Topic] = true
		case <-deadline:
			t.Fatalf("wills after the restart: %v, want sw/now and sw/later", got)
		}
	}
	quiet := time.After(3500 * time.Millisecond)
	for {
		select {
		case m := <-watch.msgs:
			if m.Topic != "sw/now" && m.Topic != "sw/later" {
				t.Fatalf("unexpected %q: sw/back's will was cancelled by its return", m.Topic)
			}
		case <-quiet:
			return
		}
	}
}

// Session expiry counts across a restart: a session whose expiry passed
// while the broker was down is gone; one within it resumes.
func TestRestartSessionExpiry(t *testing.T) {
	t.Parallel()
	s := startBroker(t)
	short := connect5(t, s.Addr, "rse-short", false, 2)
	short.sub("rse", 1)
	short.close()
	long := connect5(t, s.Addr, "rse-long", false, 3600)
	long.sub("rse", 1)
	long.close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if c := connect5(t, s.Addr, "rse-short", false, 2); c.ack.SessionPresent {
		t.Fatal("session expired while the broker was down is still present")
	}
	if c := connect5(t, s.Addr, "rse-long", false, 3600); !c.ack.SessionPresent {
		t.Fatal("unexpired session lost in the restart")
	}
}

// An inbound QoS 2 exchange survives a restart between PUBREC and PUBREL:
// the PUBREL re-sent on the new connection releases the message exactly
// once (4.3.3: the receiver keeps the packet id until PUBREL)
// [MQTT-4.4.0-1].
func TestRestartInboundQoS2(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "riq-sub", false, 3600)
	sub.sub("riq", 2)
	sub.close()
	cp := connect5Packet("riq-pub", false, 3600)
	r, _ := connectRaw(t, s.Addr, cp)
	r.Send(&packet.Publish{Topic: "riq", QoS: 2, PacketID: 9, Payload: []byte("once")})
	if _, ok := r.Read("packet").(*packet.Pubrec); !ok {
		t.Fatal("no PUBREC")
	}
	r.Conn().Close()
	restart(t, s)

	r, _ = connectRaw(t, s.Addr, cp)
	r.Send(&packet.Publish{Topic: "riq", QoS: 2, PacketID: 9, Dup: true, Payload: []byte("once")})
	if _, ok := r.Read("packet").(*packet.Pubrec); !ok {
		t.Fatal("no PUBREC for the re-sent PUBLISH")
	}
	r.Send(&packet.Pubrel{PacketID: 9})
	if c, ok := r.Read("packet").(*packet.Pubcomp); !ok || c.ReasonCode != 0 {
		t.Fatalf("PUBCOMP %+v", c)
	}
	r.Send(&packet.Pubrel{PacketID: 9})
	if _, ok := r.Read("packet").(*packet.Pubcomp); !ok {
		t.Fatal("no PUBCOMP for the repeated PUBREL")
	}
	sub = connect5(t, s.Addr, "riq-sub", false, 3600)
	sub.expectOne("riq", "once")
	sub.expectNone(300 * time.Millisecond)
}

// autopaho reconnects by itself across a broker restart and its persistent
// session carries on: what was published before and after the restart
// arrives, QoS 2 exactly once, QoS 1 at least once, in order per topic.
func TestAutopahoAcrossRestart(t *testing.T) {
	s := startBroker(t)
	u, err := url.Parse("mqtt://" + s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan *paho.Publish, 1024)
	ups := make(chan bool, 8) // session present, per connection
	sess := state.NewInMemory()
	t.Cleanup(func() { sess.Close() })
	cfg := autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 30, CleanStartOnInitialConnection: true, SessionExpiryInterval: 3600,
		ReconnectBackoff: func(int) time.Duration { return 100 * time.Millisecond }, ConnectTimeout: wait,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ack *paho.Connack) {
			ups <- ack.SessionPresent
			if !ack.SessionPresent {
				go func() {
					_, _ = cm.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "rd/#", QoS: 2}}})
				}()
			}
		},
		ClientConfig: paho.ClientConfig{ClientID: "ap-sub", Session: sess,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				msgs <- pr.Packet
				return true, nil
			}}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cm, err := autopaho.NewConnection(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), wait)
		defer dcancel()
		_ = cm.Disconnect(dctx)
	})
	select {
	case present := <-ups:
		if present {
			t.Fatal("session present on the first connection")
		}
	case <-time.After(wait):
		t.Fatal("autopaho did not connect")
	}
	time.Sleep(200 * time.Millisecond) // the subscription from OnConnectionUp

	const n = 20
	publish := func(from, to int) {
		pub := connect5(t, s.Addr, "ap-pub", true, 0)
		for i := from; i < to; i++ {
			pub.pub("rd/q1", 1, false, strconv.Itoa(i))
			pub.pub("rd/q2", 2, false, strconv.Itoa(i))
		}
		pub.close()
	}
	publish(0, n/2)
	restart(t, s)
	select {
	case present := <-ups:
		if !present {
			t.Fatal("session not present after autopaho reconnected")
		}
	case <-time.After(wait):
		t.Fatal("autopaho did not reconnect after the restart")
	}
	publish(n/2, n)
	check(t, collect(t, "ap-sub", msgs, n), n)
}

// A shared subscription restored with its session after a restart gets
// the group's messages without being subscribed again (the broker starts
// routing shared subscriptions when the first one appears, here from the
// stored session).
func TestRestartKeepsSharedSubscriptions(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "rsh", false, 3600)
	c.sub("$share/g/rsh/+", 1)
	c.close()
	restart(t, s)

	c = connect5(t, s.Addr, "rsh", false, 3600)
	if !c.ack.SessionPresent {
		t.Fatal("session lost in the restart")
	}
	pub := connect5(t, s.Addr, "rsh-pub", true, 0)
	pub.pub("rsh/a", 1, false, "after")
	c.expectOne("rsh/a", "after")
}

// Retained messages are stored without change-log entries. A store that
// an earlier broker wrote them to as logged records, a live one and a
// cleared one's tombstone, serves both as before: the live one is sent on
// subscribe, the cleared one is not, and clearing or replacing them works.
// The log holds one entry per retained message published now.
func TestRetainedStoredByEarlierBrokers(t *testing.T) {
	s := startBroker(t)
	tx := s.DB().Begin()
	old := mqtt.Message{Topic: "re/old", Payload: []byte("logged"), QoS: 1, Retain: true}
	enc, err := old.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Put("mqtt.retained", "re/old", enc); err != nil {
		t.Fatal(err)
	}
	if err := tx.Delete("mqtt.retained", "re/gone"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	sub := connect5(t, s.Addr, "re-sub", true, 0)
	sub.sub("re/#", 1)
	if m := sub.expectOne("re/old", "logged"); !m.Retain {
		t.Fatal("the logged retained message came without RETAIN")
	}
	sub.expectNone(200 * time.Millisecond)

	before, err := s.DB().Engine().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	pub := connect5(t, s.Addr, "re-pub", true, 0)
	pub.pub("re/old", 1, true, "")
	pub.pub("re/new", 1, true, "new")
	sub.expect(2) // forwarded live
	after, err := s.DB().Engine().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := after.Entries - before.Entries; n != 2 {
		t.Fatalf("two retained publishes added %d log entries, want 2 (the messages alone)", n)
	}
	late := connect5(t, s.Addr, "re-late", true, 0)
	late.sub("re/#", 1)
	late.expectOne("re/new", "new")
	late.expectNone(200 * time.Millisecond)
}
