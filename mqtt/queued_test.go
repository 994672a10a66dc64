package mqtt_test

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// queueSub is a persistent subscriber of either protocol version, seen
// through the payloads it receives.
type queueSub interface {
	sub(filter string, qos byte)
	close()
	// payloads returns the topic=payload of the next n messages.
	payloads(n int) []string
	none(d time.Duration)
}

type queueSub3 struct{ *client3 }

func (c queueSub3) payloads(n int) []string {
	var out []string
	for _, m := range c.expect(n) {
		out = append(out, m.Topic()+"="+string(m.Payload()))
	}
	return out
}

func (c queueSub3) none(d time.Duration) { c.expectNone(d) }

type queueSub5 struct{ *client5 }

func (c queueSub5) payloads(n int) []string { return topics5(c.expect(n)) }

func (c queueSub5) none(d time.Duration) { c.expectNone(d) }

// queueSubs connects a persistent session under each protocol version.
var queueSubs = []struct {
	name    string
	connect func(t *testing.T, addr, id string) queueSub
}{
	{"3.1.1", func(t *testing.T, addr, id string) queueSub { return queueSub3{connect3(t, addr, id, false)} }},
	{"5.0", func(t *testing.T, addr, id string) queueSub { return queueSub5{connect5(t, addr, id, false, 3600)} }},
}

// quietAndBusy returns the publications of n messages to quiet/a, each
// after every messages to busy/b: payloads a0.. and b0...
func quietAndBusy(n, every int) [][2]string { return quietAndBusyFrom(0, 0, n, every) }

// quietAndBusyFrom is quietAndBusy numbering from aN and bN.
func quietAndBusyFrom(aN, bN, n, every int) [][2]string {
	var out [][2]string
	for i := range n {
		for j := range every {
			out = append(out, [2]string{"busy/b", fmt.Sprintf("b%d", bN+i*every+j)})
		}
		out = append(out, [2]string{"quiet/a", fmt.Sprintf("a%d", aN+i)})
	}
	return out
}

// wantQuiet returns "quiet/a=aN" for N in [from, to).
func wantQuiet(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("quiet/a=a%d", i))
	}
	return out
}

// logKey returns the log key of the message with payload on topic.
// Messages published in a burst may share a commit, so the log is cut
// at the commit of a message, keeping the others of that commit.
func logKey(t *testing.T, db *table.DB, topic, payload string) engine.LogKey {
	t.Helper()
	ms, err := mqtttest.LogMessages(ctxT(t), db, topic)
	var key engine.LogKey
	for _, m := range ms {
		if string(m.Message.Payload) == payload {
			key = m.Key // the last, if it was published again
		}
	}
	if err != nil || key == 0 {
		t.Fatalf("no %s=%s in the message log (%v)", topic, payload, err)
	}
	return key
}

// retainOnce runs one retention pass.
func retainOnce(t *testing.T, s *mqtttest.Server) {
	t.Helper()
	if err := s.Broker().Retain(ctxT(t)); err != nil {
		t.Fatalf("retain: %v", err)
	}
}

// retainDown runs retention passes until the log starts at key or above
// (the publisher's session, gone with its connection, may hold it for a
// moment after the DISCONNECT), and checks it starts at key.
func retainDown(t *testing.T, s *mqtttest.Server, key engine.LogKey) {
	t.Helper()
	var st engine.LogStats
	waitFor(t, fmt.Sprintf("the log cut at %d", key), func() bool {
		retainOnce(t, s)
		var err error
		if st, err = s.DB().LogStats(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return st.First >= key
	})
	if st.First != key {
		t.Fatalf("log cut at %d, want %d: messages the session keeps were removed", st.First, key)
	}
}

// retainAgain runs one more pass with nothing new and checks it changes
// nothing: the log's start and the retention drops stay.
func retainAgain(t *testing.T, s *mqtttest.Server) {
	t.Helper()
	st0, err := s.DB().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	d0 := s.Broker().Stats().Dropped["retention"]
	retainOnce(t, s)
	st, err := s.DB().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.First != st0.First || s.Broker().Stats().Dropped["retention"] != d0 {
		t.Fatalf("a pass with nothing new moved the log from %d to %d, or dropped %d more",
			st0.First, st.First, s.Broker().Stats().Dropped["retention"]-d0)
	}
}

// TestQueueLimitCountsOwnMessages: an offline session subscribed to a
// quiet topic keeps every one of its messages however many others the log
// holds, and no longer holds the log below its oldest one.
func TestQueueLimitCountsOwnMessages(t *testing.T) {
	for _, v := range queueSubs {
		t.Run(v.name, func(t *testing.T) {
			s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50 })
			sub := v.connect(t, s.Addr, "quiet-sub")
			sub.sub("quiet/a", 1)
			sub.close()
			pub := connect3(t, s.Addr, "quiet-pub", true)
			pub.pubBurst(1, quietAndBusy(10, 100)...) // 1,000 to busy/b, 10 to quiet/a
			pub.close()
			// The session no longer holds the messages of busy/b before
			// its first one.
			retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a0"))
			if d := s.Broker().Stats().Dropped["retention"]; d != 0 {
				t.Fatalf("dropped %d messages of a session within its limit", d)
			}
			if busy := logPayloads(t, s.DB(), "busy/b"); len(busy) >= 1000 {
				t.Fatalf("log still holds all %d messages of busy/b", len(busy))
			}
			retainAgain(t, s)
			sub = v.connect(t, s.Addr, "quiet-sub")
			if got, want := sub.payloads(10), wantQuiet(0, 10); !slices.Equal(got, want) {
				t.Fatalf("received %v, want %v", got, want)
			}
			sub.none(200 * time.Millisecond)
		})
	}
}

// TestQueueLimitKeepsNewestOwn: an offline session holding more of its
// own messages than the limit keeps exactly the newest limit of them, in
// order; the rest count as dropped by retention, and the log below them
// goes.
func TestQueueLimitKeepsNewestOwn(t *testing.T) {
	for _, v := range queueSubs {
		t.Run(v.name, func(t *testing.T) {
			s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50 })
			sub := v.connect(t, s.Addr, "over-sub")
			sub.sub("quiet/a", 1)
			sub.close()
			pub := connect3(t, s.Addr, "over-pub", true)
			pub.pubBurst(1, quietAndBusy(100, 10)...) // 1,000 to busy/b, 100 to quiet/a
			pub.close()
			retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a50"))
			if d := s.Broker().Stats().Dropped["retention"]; d != 50 {
				t.Fatalf("dropped by retention = %d, want 50", d)
			}
			if quiet := logPayloads(t, s.DB(), "quiet/a"); len(quiet) < 50 || quiet[len(quiet)-50] != "a50" {
				t.Fatalf("log keeps %d messages of quiet/a, want a50..a99 among them", len(quiet))
			}
			retainAgain(t, s)
			sub = v.connect(t, s.Addr, "over-sub")
			if got, want := sub.payloads(50), wantQuiet(50, 100); !slices.Equal(got, want) {
				t.Fatalf("received %v, want %v", got, want)
			}
			sub.none(200 * time.Millisecond)
		})
	}
}

// TestQueueLimitAcrossRestart: a cut is persisted with the session, and
// a restarted broker counts the session's messages afresh from there.
func TestQueueLimitAcrossRestart(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50 })
	sub := connect5(t, s.Addr, "restart-sub", false, 3600)
	sub.sub("quiet/a", 1)
	sub.close()
	pub := connect3(t, s.Addr, "restart-pub", true)
	pubs := quietAndBusy(100, 10)
	pub.pubBurst(1, pubs[:660]...) // a0..a59 and the busy/b before them
	pub.close()
	retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a10"))
	if d := s.Broker().Stats().Dropped["retention"]; d != 10 {
		t.Fatalf("dropped by retention before the restart = %d, want 10", d)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	pub = connect3(t, s.Addr, "restart-pub", true)
	pub.pubBurst(1, pubs[660:]...) // a60..a99
	pub.close()
	retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a50"))
	if d := s.Broker().Stats().Dropped["retention"]; d != 40 {
		t.Fatalf("dropped by retention after the restart = %d, want 40", d)
	}
	retainAgain(t, s)
	sub = connect5(t, s.Addr, "restart-sub", false, 3600)
	if got, want := topics5(sub.expect(50)), wantQuiet(50, 100); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	sub.expectNone(200 * time.Millisecond)
}

// TestQueueLimitRacesReconnect: retention passes run all the time while
// the session is offline, and it reconnects round after round, landing
// before, during and after the pass that cuts it. Whatever the order,
// the connection receives either exactly its newest limit messages, when
// retention counted the others as dropped, or everything from where it
// stopped, with nothing received twice but re-sends (flagged DUP) of what
// it had not acknowledged: a cut is never undone by the session's own
// write, nor a resume started from a checkpoint a cut replaced.
func TestQueueLimitRacesReconnect(t *testing.T) {
	const limit = 50
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = limit })
	sub := connect5(t, s.Addr, "race-sub", false, 3600)
	sub.sub("quiet/a", 1)
	sub.close()
	// Passes run while pause is not held: a round's messages are all in
	// the log before the pass that may cut them.
	var pause sync.Mutex
	stop := make(chan struct{})
	passes := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				passes <- nil
				return
			default:
			}
			pause.Lock()
			err := s.Broker().Retain(ctxT(t))
			pause.Unlock()
			if err != nil {
				passes <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-passes; err != nil {
			t.Errorf("retain: %v", err)
		}
	}()
	pub := connect3(t, s.Addr, "race-pub", false)
	published, next, dropped, cuts := 0, 0, 0, 0
	for round := range 12 {
		var pubs [][2]string
		for range 60 {
			pubs = append(pubs, [2]string{"busy/b", "b"}, [2]string{"quiet/a", fmt.Sprintf("a%d", published)})
			published++
		}
		pause.Lock()
		pub.pubBurst(1, pubs...)
		pause.Unlock()
		time.Sleep(time.Duration(round%4) * time.Millisecond)
		sub = connect5(t, s.Addr, "race-sub", false, 3600)
		// Connected: no cut of this session is under way or can start.
		d := int(s.Broker().Stats().Dropped["retention"]) - dropped
		dropped += d
		var got []*paho.Publish
		for len(got) == 0 || string(got[len(got)-1].Payload) != fmt.Sprintf("a%d", published-1) {
			got = append(got, sub.expect(1)...)
		}
		first := published - len(got)
		if d > 0 {
			cuts++
			first = published - limit
		}
		if want := wantQuiet(first, published); !slices.Equal(topics5(got), want) {
			t.Fatalf("round %d: %d dropped, received %v, want %v", round, d, topics5(got), want)
		}
		if d == 0 && first > next {
			t.Fatalf("round %d: nothing dropped, yet a%d..a%d missing", round, next, first-1)
		}
		for i, m := range got {
			if first+i < next && !m.Duplicate() {
				t.Fatalf("round %d: %s received again without DUP", round, m.Payload)
			}
		}
		next = published
		sub.close()
	}
	t.Logf("%d of 12 reconnects found their session cut", cuts)
}

// TestQueueCutHeldReconnect: a client reconnecting while retention is
// moving its session's checkpoint waits for the move, then resumes from
// the moved checkpoint: its CONNACK never comes while the move is held
// between reading the session and committing the cut.
func TestQueueCutHeldReconnect(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := startBroker(t, func(o *mqtt.Options) {
		o.MaxQueuedMessages = 50
		o.Hooks.Submit = func(k mqtt.Kind, client string) {
			if k == mqtt.KindQueueCut && client == "held-sub" {
				once.Do(func() { close(reached) })
				<-release
			}
		}
	})
	sub := connect5(t, s.Addr, "held-sub", false, 3600)
	sub.sub("quiet/a", 1)
	sub.close()
	pub := connect3(t, s.Addr, "held-pub", true)
	pub.pubBurst(1, quietAndBusy(100, 1)...)
	pub.close()
	passed := make(chan error, 1)
	go func() { passed <- s.Broker().Retain(ctxT(t)) }()
	select {
	case <-reached:
	case <-time.After(wait):
		t.Fatal("retention never came to cut the session")
	}
	connected := make(chan *client5, 1)
	go func() {
		c, err := dial5(t, s.Addr, &paho.Connect{ClientID: "held-sub", KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)}}, nil)
		if err != nil {
			t.Errorf("reconnect: %v", err)
		}
		connected <- c
	}()
	select {
	case <-connected:
		close(release)
		t.Fatal("the session resumed while a cut of its checkpoint was under way")
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-passed; err != nil {
		t.Fatalf("retain: %v", err)
	}
	if sub = <-connected; sub == nil {
		t.FailNow()
	}
	if d := s.Broker().Stats().Dropped["retention"]; d != 50 {
		t.Fatalf("dropped by retention = %d, want 50", d)
	}
	if got, want := topics5(sub.expect(50)), wantQuiet(50, 100); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	sub.expectNone(200 * time.Millisecond)
}

// TestQueueLimitSkipsSharedAndQoS0: what an offline session would not be
// sent does not count against its limit: messages of its shared
// subscriptions (a group serves members that are online) and of its QoS 0
// ones (no message published while it was away).
func TestQueueLimitSkipsSharedAndQoS0(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50 })
	sub := connect5(t, s.Addr, "mixed-sub", false, 3600)
	sub.subOpts(nil, paho.SubscribeOptions{Topic: "$share/g/busy/b", QoS: 1})
	sub.sub("zero/z", 0)
	sub.sub("quiet/a", 1)
	sub.close()
	pub := connect3(t, s.Addr, "mixed-pub", true)
	var pubs [][2]string
	for i, p := range quietAndBusy(10, 10) {
		pubs = append(pubs, p, [2]string{"zero/z", fmt.Sprint(i)})
	}
	pub.pubBurst(1, pubs...) // 100 to busy/b, 110 to zero/z, 10 to quiet/a
	pub.close()
	// The session kept its own 10; the shared group, whose only member
	// it is, kept the first 50 of busy/b in its own queue, which the
	// session's limit does not count and which holds as many.
	retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a0"))
	st := s.Broker().Stats()
	if st.Dropped["retention"] != 0 || st.Dropped["shared_queue"] != 50 || st.SharedQueued != 50 {
		t.Fatalf("dropped %v, shared queued %d; want no retention drop, 50 shared queued and 50 past the group's bound", st.Dropped, st.SharedQueued)
	}
	sub = connect5(t, s.Addr, "mixed-sub", false, 3600)
	var quiet, busy []string
	for _, m := range sub.expect(60) {
		switch m.Topic {
		case "quiet/a":
			quiet = append(quiet, m.Topic+"="+string(m.Payload))
		case "busy/b":
			busy = append(busy, string(m.Payload))
		default:
			t.Fatalf("unexpected message %q %q", m.Topic, m.Payload)
		}
	}
	if !slices.Equal(quiet, wantQuiet(0, 10)) {
		t.Fatalf("received %v, want %v", quiet, wantQuiet(0, 10))
	}
	for i, p := range busy {
		if p != fmt.Sprintf("b%d", i) {
			t.Fatalf("the group's queue delivered %v, want b0..b49 in order", busy)
		}
	}
	sub.expectNone(200 * time.Millisecond)
}

// expectQuietKept checks that client's offline session, subscribed to
// quiet/a among other traffic, kept its 10 messages there and no longer
// holds the log below the first: retention cut the log at a0, dropped
// nothing, and a reconnect receives a0..a9 and nothing else.
func expectQuietKept(t *testing.T, s *mqtttest.Server, client string) {
	t.Helper()
	retainDown(t, s, logKey(t, s.DB(), "quiet/a", "a0"))
	if d := s.Broker().Stats().Dropped["retention"]; d != 0 {
		t.Fatalf("dropped %d messages of a session with 10 of its own", d)
	}
	sub := connect5(t, s.Addr, client, false, 3600)
	if got, want := topics5(sub.expect(10)), wantQuiet(0, 10); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	sub.expectNone(200 * time.Millisecond)
}

// TestQueueLimitSkipsQoS0OfNodes: where nodes share the store, QoS 0
// messages go through the log, and an offline session does not count
// them against its limit, even to a QoS 1 subscription: it would never
// receive them.
func TestQueueLimitSkipsQoS0OfNodes(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50; o.NodeID = "A" })
	sub := connect5(t, s.Addr, "nodes-sub", false, 3600)
	sub.sub("zero/z", 1)
	sub.sub("quiet/a", 1)
	sub.close()
	pub := connect3(t, s.Addr, "nodes-pub", true)
	var zeros [][2]string
	for i := range 110 {
		zeros = append(zeros, [2]string{"zero/z", fmt.Sprint(i)})
	}
	pub.pubBurst(0, zeros...)
	pub.pubBurst(1, quietAndBusy(10, 0)...)
	pub.close()
	expectQuietKept(t, s, "nodes-sub")
}

// TestQueueLimitWaitsForWill: a session whose delayed will is still to be
// published is not cut, since a write of its record before the will's own
// would cancel the will; once the will is out, the limit applies.
func TestQueueLimitWaitsForWill(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 50 })
	watch := connect5(t, s.Addr, "will-watch", true, 0)
	watch.sub("will/w", 1)
	nc, err := net.DialTimeout("tcp", s.Addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := connectOn5(t, nc, &paho.Connect{ClientID: "will-sub", KeepAlive: 30,
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: u32(3600)},
		WillMessage:    &paho.WillMessage{Topic: "will/w", Payload: []byte("gone"), QoS: 1},
		WillProperties: &paho.WillProperties{WillDelayInterval: u32(2)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub.sub("quiet/a", 1)
	_ = nc.Close() // no DISCONNECT: the will is due after its delay
	waitFor(t, "the broker to see the connection end", func() bool { return s.Broker().Stats().ConnectionsOnline == 1 })
	pub := connect3(t, s.Addr, "will-pub", true)
	pub.pubBurst(1, quietAndBusy(100, 1)...)
	pub.close()
	retainOnce(t, s)
	select {
	case m := <-watch.msgs:
		// Slower than the will's delay: the pass may have come after it.
		t.Logf("the will (%s) went before the pass could see it pending", m.Payload)
	default:
		if d := s.Broker().Stats().Dropped["retention"]; d != 0 {
			t.Fatalf("dropped %d messages of a session whose will was pending", d)
		}
		watch.expectOne("will/w", "gone")
	}
	waitFor(t, "the cut once the will is out", func() bool {
		retainOnce(t, s)
		return s.Broker().Stats().Dropped["retention"] == 50
	})
	sub = connect5(t, s.Addr, "will-sub", false, 3600)
	if got, want := topics5(sub.expect(50)), wantQuiet(50, 100); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	sub.expectNone(200 * time.Millisecond)
}

// TestQueueLimitManySessionsManyPasses: sessions at different positions,
// counted over several passes from what earlier passes counted, each keep
// exactly their newest messages up to the limit.
func TestQueueLimitManySessionsManyPasses(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 20 })
	for _, c := range [][2]string{{"early-a", "quiet/a"}, {"early-b", "busy/b"}} {
		sub := connect5(t, s.Addr, c[0], false, 3600)
		sub.sub(c[1], 1)
		sub.close()
	}
	pub := connect3(t, s.Addr, "many-pub", false)
	pub.pubBurst(1, quietAndBusyFrom(0, 0, 10, 3)...) // a0..a9, b0..b29
	retainOnce(t, s)
	late := connect5(t, s.Addr, "late-a", false, 3600)
	late.sub("quiet/a", 1)
	late.close()
	pub.pubBurst(1, quietAndBusyFrom(10, 30, 10, 3)...) // a10..a19, b30..b59
	retainOnce(t, s)
	pub.pubBurst(1, quietAndBusyFrom(20, 60, 5, 0)...) // a20..a24
	retainOnce(t, s)
	// early-b: 10 dropped in the first pass, 30 in the second; early-a: 5
	// in the third; late-a none.
	if d := s.Broker().Stats().Dropped["retention"]; d != 45 {
		t.Fatalf("dropped by retention = %d, want 45", d)
	}
	for _, c := range []struct {
		id   string
		want []string
	}{
		{"early-a", wantQuiet(5, 25)},
		{"late-a", wantQuiet(10, 25)},
	} {
		sub := connect5(t, s.Addr, c.id, false, 3600)
		if got := topics5(sub.expect(len(c.want))); !slices.Equal(got, c.want) {
			t.Fatalf("%s received %v, want %v", c.id, got, c.want)
		}
		sub.expectNone(100 * time.Millisecond)
	}
	var want []string
	for i := 40; i < 60; i++ {
		want = append(want, fmt.Sprintf("busy/b=b%d", i))
	}
	sub := connect5(t, s.Addr, "early-b", false, 3600)
	if got := topics5(sub.expect(20)); !slices.Equal(got, want) {
		t.Fatalf("early-b received %v, want %v", got, want)
	}
	sub.expectNone(100 * time.Millisecond)
}

// TestQueueLimitAcrossBatches: a pass goes on through batches of the
// checkpoint index while the sessions it finds are further behind than
// the limit, so a fleet of offline sessions, each on its own topic, is
// cut where it holds too much, wherever it sorts, and the rest move up
// losing nothing.
func TestQueueLimitAcrossBatches(t *testing.T) {
	s := mqtttest.StartSync(t, testEngine, engine.SyncNone, mqtt.Options{MaxQueuedMessages: 50})
	const fleet = 2500
	var sessions []mqtt.OfflineSession
	for i := range fleet {
		sessions = append(sessions, mqtt.OfflineSession{ClientID: fmt.Sprintf("dev-%04d", i), Version: packet.V5,
			ExpirySeconds: 3600, Subscriptions: []topic.Subscription{{Filter: fmt.Sprintf("dev/%04d", i), QoS: 1}}})
	}
	if err := mqtt.AddOfflineSessions(ctxT(t), s.DB(), sessions); err != nil {
		t.Fatal(err)
	}
	busy := []int{0, 1100, 2499} // in the first, second and third batch
	pub := connect3(t, s.Addr, "fleet-pub", true)
	var pubs [][2]string
	for j := range 60 {
		for _, i := range busy {
			pubs = append(pubs, [2]string{fmt.Sprintf("dev/%04d", i), fmt.Sprint(j)})
		}
	}
	pubs = append(pubs, [2]string{"dev/0007", "only"})
	pub.pubBurst(1, pubs...)
	pub.close()
	retainOnce(t, s)
	if d := s.Broker().Stats().Dropped["retention"]; d != 30 {
		t.Fatalf("dropped by retention = %d, want 10 for each of %d sessions", d, len(busy))
	}
	for _, i := range busy {
		sub := connect5(t, s.Addr, fmt.Sprintf("dev-%04d", i), false, 3600)
		for j, m := range sub.expect(50) {
			if want := fmt.Sprint(10 + j); string(m.Payload) != want {
				t.Fatalf("dev-%04d: message %d = %s, want %s", i, j, m.Payload, want)
			}
		}
		sub.expectNone(100 * time.Millisecond)
		sub.close()
	}
	sub := connect5(t, s.Addr, "dev-0007", false, 3600)
	sub.expectOne("dev/0007", "only")
	sub.expectNone(100 * time.Millisecond)
}
