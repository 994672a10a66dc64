package conformance

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// The replay suite: MQTT clients replaying the message log from a time or
// a position on subscribe (docs/replay.md), then continuing live.
func init() {
	register("replay",
		Case{Name: "R01_replay_from_time_then_live", Run: caseReplayFromTime},
		Case{Name: "R02_replay_from_position_while_publishing", Run: caseReplayFromPositionWhilePublishing},
		Case{Name: "R03_resume_from_stored_position_after_restart", Run: caseReplayResumeAfterRestart},
		Case{Name: "R04_session_restart_mid_replay", Run: caseReplaySessionRestartMidReplay},
		Case{Name: "R05_replay_older_than_retention", Run: caseReplayOlderThanRetention},
		Case{Name: "R06_replay_prefix_for_3_1_1", Run: caseReplayPrefix311},
		Case{Name: "R07_embedded_app_and_mqtt_clients", Run: caseEmbeddedAppAndMQTT},
		Case{Name: "R08_retention_rule_per_topic_filter", Run: caseRetentionRulePerFilter},
	)
}

// replayHistory keeps an hour of history in the replay cases.
var replayHistory = mqtt.Options{History: time.Hour}

// replayed is one message a replay client took.
type replayed struct {
	Payload string
	Pos     string // its tidemark-position, "" when none came
	Conn    int
}

// replayClient is a raw client that acknowledges each QoS 1 PUBLISH as it
// reads it and records what it took.
type replayClient struct {
	*rawClient
	t    T
	name string
	v    packet.Version
	took []replayed
	conn int
}

func newReplayClient(t T, addr, id string, v packet.Version, clean bool, recvMax uint16) *replayClient {
	t.Helper()
	c := dialRaw(t, id, addr, v)
	cp := mqtttest.ConnectPacket(id, v, clean)
	if recvMax > 0 {
		cp.Properties.SetReceiveMaximum(recvMax)
	}
	c.Connect(cp)
	return &replayClient{rawClient: c, t: t, name: id, v: v, conn: 1}
}

// subscribe sends a SUBSCRIBE for filter asking for a replay from from
// (none when empty) and returns the SUBACK; PUBLISHes that come first are
// taken.
func (c *replayClient) subscribe(pi uint16, filter, from string) *packet.Suback {
	c.t.Helper()
	s := &packet.Subscribe{PacketID: pi, Subscriptions: []packet.Subscription{{Filter: filter, QoS: packet.QoS1}}}
	if from != "" {
		s.Properties.AddUser(mqtt.PropReplayFrom, from)
	}
	c.Send(s)
	for {
		p := c.Read("SUBACK")
		if pub, ok := p.(*packet.Publish); ok {
			c.takeOne(pub)
			continue
		}
		ack, ok := p.(*packet.Suback)
		if !ok || ack.PacketID != pi {
			c.t.Fatalf("%s: got %s, want SUBACK %d", c.name, mqtttest.Describe(p), pi)
		}
		return ack
	}
}

func (c *replayClient) takeOne(p *packet.Publish) {
	r := replayed{Payload: string(p.Payload), Conn: c.conn}
	for _, u := range p.Properties.User {
		if u.Key == mqtt.PropPosition {
			r.Pos = u.Value
		}
	}
	c.took = append(c.took, r)
	if p.QoS == packet.QoS1 {
		c.Send(&packet.Puback{PacketID: p.PacketID})
	}
}

// takeUntil takes PUBLISHes until it has n in all.
func (c *replayClient) takeUntil(n int) {
	c.t.Helper()
	for len(c.took) < n {
		p := c.Read(fmt.Sprintf("PUBLISH %d of %d", len(c.took)+1, n))
		pub, ok := p.(*packet.Publish)
		if !ok {
			c.t.Fatalf("%s: got %s, want PUBLISH", c.name, mqtttest.Describe(p))
		}
		c.takeOne(pub)
	}
}

// payloads returns what it took, in order.
func (c *replayClient) payloads() []string {
	out := make([]string, len(c.took))
	for i, r := range c.took {
		out[i] = r.Payload
	}
	return out
}

// expectExactly checks that it took exactly want, in order, each with a
// position, positions increasing, and that nothing more comes.
func (c *replayClient) expectExactly(want []string) {
	c.t.Helper()
	c.takeUntil(len(want))
	if p, ok := c.Next(quiet); ok {
		c.t.Fatalf("%s: got %s after the %d expected messages %v", c.name, mqtttest.Describe(p), len(want), c.took)
	}
	if got := c.payloads(); !equalStrings(got, want) {
		c.t.Fatalf("%s: took %s, want %s", c.name, abbrev(got), abbrev(want))
	}
	checkPositions(c.t, c.took, c.v == packet.V5)
}

// checkPositions checks every message carries a position (5.0) and that
// they increase.
func checkPositions(t T, took []replayed, want bool) {
	t.Helper()
	var last table.Cursor
	for i, r := range took {
		if !want {
			if r.Pos != "" {
				t.Fatalf("message %d (%s) carries a position on 3.1.1", i, r.Payload)
			}
			continue
		}
		var c table.Cursor
		if err := c.UnmarshalText([]byte(r.Pos)); err != nil || r.Pos == "" {
			t.Fatalf("message %d (%s): position %q: %v", i, r.Payload, r.Pos, err)
		}
		if i > 0 && !last.Less(c) {
			t.Fatalf("message %d (%s): position %s not after %s", i, r.Payload, c, last)
		}
		last = c
	}
}

// publishSeq publishes payloads prefix+NNN for n in [from, to) at QoS 1 on
// topics[n%len(topics)], pipelined in bursts of 10, each burst
// acknowledged before the next.
func publishSeq(c *rawClient, prefix string, topics []string, from, to int) error {
	for n := from; n < to; {
		var burst []packet.Packet
		for pi := uint16(1); pi <= 10 && n < to; pi, n = pi+1, n+1 {
			burst = append(burst, pubQoS1(pi, topics[n%len(topics)], fmt.Sprintf("%s%03d", prefix, n)))
		}
		if err := c.TrySend(burst...); err != nil {
			return err
		}
		for range burst {
			p, ok := c.Next(waitFor)
			if !ok || p.Type() != packet.TypePuback || mqtttest.ReasonOf(p).IsError() {
				return fmt.Errorf("publish %s: got %s, want PUBACK", prefix, mqtttest.Describe(p))
			}
		}
	}
	return nil
}

func mustPublishSeq(t T, addr, id, prefix string, topics []string, from, to int) {
	t.Helper()
	pub, _ := connectRaw(t, id, addr, id, packet.V311, true)
	if err := publishSeq(pub, prefix, topics, from, to); err != nil {
		t.Fatalf("%v", err)
	}
	pub.Disconnect()
}

func seqOf(prefix string, from, to int) []string {
	var out []string
	for n := from; n < to; n++ {
		out = append(out, fmt.Sprintf("%s%03d", prefix, n))
	}
	return out
}

func wantGranted(t T, ack *packet.Suback) {
	t.Helper()
	if len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != packet.ReasonCode(packet.QoS1) {
		t.Fatalf("SUBACK %v (%q), want QoS 1 granted", ack.ReasonCodes, ack.Properties.ReasonString)
	}
}

// caseReplayFromTime (R01): a subscription replaying from a time gets the
// messages published since then, in order and each with its position,
// then the live ones, and no message older than the time.
func caseReplayFromTime(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	topics := []string{"r01/a", "r01/b/c"}
	mustPublishSeq(t, s.Addr, "r01-pub", "old", topics, 0, 10)
	time.Sleep(50 * time.Millisecond) // the log's clock is to the millisecond
	from := time.Now()
	time.Sleep(50 * time.Millisecond)
	mustPublishSeq(t, s.Addr, "r01-pub", "new", topics, 0, 10)
	mustPublishSeq(t, s.Addr, "r01-pub", "other", []string{"r01x/a"}, 0, 3)
	sub := newReplayClient(t, s.Addr, "r01-sub", packet.V5, true, 0)
	wantGranted(t, sub.subscribe(1, "r01/#", from.UTC().Format(time.RFC3339Nano)))
	sub.takeUntil(10)
	mustPublishSeq(t, s.Addr, "r01-pub", "live", topics, 0, 5)
	sub.expectExactly(append(seqOf("new", 0, 10), seqOf("live", 0, 5)...))

	// A negative duration is a time too.
	dur := newReplayClient(t, s.Addr, "r01-dur", packet.V5, true, 0)
	wantGranted(t, dur.subscribe(1, "r01/b/#", "-1h"))
	var want []string
	for _, p := range append(append(seqOf("old", 0, 10), seqOf("new", 0, 10)...), seqOf("live", 0, 5)...) {
		if n := p[len(p)-1] - '0'; n%2 == 1 {
			want = append(want, p)
		}
	}
	dur.expectExactly(want)
}

// caseReplayFromPositionWhilePublishing (R02): a client resumes from a
// position another delivery carried while messages keep coming; it gets
// every message after that position exactly once, in order, across the
// switch from replay to live.
func caseReplayFromPositionWhilePublishing(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	topics := []string{"r02/a", "r02/b", "r02/c/d"}
	mustPublishSeq(t, s.Addr, "r02-pub", "m", topics, 0, 100)
	first := newReplayClient(t, s.Addr, "r02-first", packet.V5, true, 0)
	wantGranted(t, first.subscribe(1, "r02/#", "0"))
	first.takeUntil(40)
	if got := first.payloads()[:40]; !equalStrings(got, seqOf("m", 0, 40)) {
		t.Fatalf("replay from 0 took %s, want m000..m039", abbrev(got))
	}
	checkPositions(t, first.took[:40], true)
	pos := first.took[39].Pos
	first.Disconnect()

	pub, _ := connectRaw(t, "r02-pub", s.Addr, "r02-pub", packet.V311, true)
	published := make(chan error, 1)
	go func() { published <- publishSeq(pub, "m", topics, 100, 400) }()
	second := newReplayClient(t, s.Addr, "r02-second", packet.V5, true, 0)
	wantGranted(t, second.subscribe(1, "r02/#", pos))
	// A third switches later, with a window of 5 that keeps it behind.
	third := newReplayClient(t, s.Addr, "r02-third", packet.V5, true, 5)
	wantGranted(t, third.subscribe(1, "r02/#", "0"))
	if err := <-published; err != nil {
		t.Fatalf("%v", err)
	}
	second.expectExactly(seqOf("m", 40, 400))
	third.expectExactly(seqOf("m", 0, 400))
}

// caseReplayResumeAfterRestart (R03): a client stores the position of the
// last message it took; after a broker restart it replays from there and
// gets every later message once.
func caseReplayResumeAfterRestart(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	topics := []string{"r03/a", "r03/b"}
	mustPublishSeq(t, s.Addr, "r03-pub", "m", topics, 0, 50)
	c := newReplayClient(t, s.Addr, "r03-sub", packet.V5, true, 0)
	wantGranted(t, c.subscribe(1, "r03/#", "0"))
	c.takeUntil(20)
	stored := c.took[19].Pos
	c.Drop()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	mustPublishSeq(t, s.Addr, "r03-pub", "m", topics, 50, 60)
	again := newReplayClient(t, s.Addr, "r03-sub", packet.V5, true, 0)
	wantGranted(t, again.subscribe(1, "r03/#", stored))
	again.takeUntil(40)
	mustPublishSeq(t, s.Addr, "r03-pub", "m", topics, 60, 65)
	again.expectExactly(seqOf("m", 20, 65))
}

// caseReplaySessionRestartMidReplay (R04): a persistent session's replay
// is cut by a dropped connection and a broker restart; the session resumes
// the replay where the client stopped acknowledging: nothing lost, at most
// the unacknowledged window again, order kept.
func caseReplaySessionRestartMidReplay(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	topics := []string{"r04/a", "r04/b"}
	mustPublishSeq(t, s.Addr, "r04-pub", "m", topics, 0, 200)
	const window = 10
	c := newReplayClient(t, s.Addr, "r04-sub", packet.V5, false, window)
	wantGranted(t, c.subscribe(1, "r04/#", "0"))
	c.takeUntil(60)
	c.Drop()
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	again := newReplayClient(t, s.Addr, "r04-sub", packet.V5, false, window)
	again.conn = 2
	defer func() {
		if t.Failed() {
			t.Logf("second connection took %s", abbrev(again.payloads()))
		}
	}()
	again.takeUntil(140)
	mustPublishSeq(t, s.Addr, "r04-pub", "m", topics, 200, 210)
	want := seqOf("m", 0, 210)
	// The second connection starts at most a window before where the
	// first stopped, then goes on in order without a gap.
	again.takeUntil(150)
	for !strings.HasSuffix(again.took[len(again.took)-1].Payload, "209") {
		again.takeUntil(len(again.took) + 1)
	}
	if p, ok := again.Next(quiet); ok {
		t.Fatalf("got %s after m209", mqtttest.Describe(p))
	}
	got := again.payloads()
	startAt := -1
	for i, w := range want {
		if w == got[0] {
			startAt = i
		}
	}
	if startAt < 0 || startAt > 60 || 60-startAt > window {
		t.Fatalf("resumed at %s: want one of the %d messages before m060, or m060", got[0], window)
	}
	if !equalStrings(got, want[startAt:]) {
		t.Fatalf("after the restart took %s, want %s", abbrev(got), abbrev(want[startAt:]))
	}
	checkPositions(t, again.took, true)
	t.Logf("first connection took %d, second re-sent %d", len(c.took), 60-startAt)
}

// caseReplayOlderThanRetention (R05): asking for history retention
// removed is refused, saying so and naming the oldest position; a replay
// from that position is granted and starts there.
func caseReplayOlderThanRetention(t T, tg Target) {
	s := startBroker(t, tg, mqtt.Options{RetentionEvery: time.Hour})
	topics := []string{"r05/a"}
	mustPublishSeq(t, s.Addr, "r05-pub", "gone", topics, 0, 10)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	head, err := s.DB().Head(ctx)
	if err != nil {
		t.Fatalf("head: %v", err)
	}
	// The publisher's session goes when its connection's teardown ends;
	// until then its checkpoint holds the log.
	eventually(t, "retention removes every message", func() bool {
		if err := s.Broker().Retain(ctx); err != nil {
			t.Fatalf("retain: %v", err)
		}
		st, err := s.DB().LogStats(ctx)
		if err != nil {
			t.Fatalf("log stats: %v", err)
		}
		return st.Floor > head.Key
	})
	c := newReplayClient(t, s.Addr, "r05-sub", packet.V5, true, 0)
	var oldest string
	for i, from := range []string{"0", "-1h", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)} {
		ack := c.subscribe(uint16(i+1), "r05/#", from)
		if len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != packet.ImplementationSpecificError {
			t.Fatalf("replay from %s: SUBACK %v, want %v", from, ack.ReasonCodes, packet.ImplementationSpecificError)
		}
		if !strings.Contains(ack.Properties.ReasonString, "older than the retained log") {
			t.Fatalf("replay from %s: reason string %q does not say the log is younger", from, ack.Properties.ReasonString)
		}
		o := ""
		for _, u := range ack.Properties.User {
			if u.Key == mqtt.PropOldestPosition {
				o = u.Value
			}
		}
		if o == "" || (oldest != "" && o != oldest) {
			t.Fatalf("replay from %s: oldest position %q (before: %q)", from, o, oldest)
		}
		oldest = o
	}
	if len(c.took) != 0 {
		t.Fatalf("a refused replay delivered %d messages", len(c.took))
	}
	mustPublishSeq(t, s.Addr, "r05-pub", "kept", topics, 0, 3)
	wantGranted(t, c.subscribe(9, "r05/#", oldest))
	mustPublishSeq(t, s.Addr, "r05-pub", "kept", topics, 3, 5)
	c.expectExactly(seqOf("kept", 0, 5))

	// A start that cannot be parsed says how to write one.
	ack := c.subscribe(10, "r05/#", "yesterday")
	if ack.ReasonCodes[0] != packet.ImplementationSpecificError || !strings.Contains(ack.Properties.ReasonString, "RFC 3339") {
		t.Fatalf("replay from \"yesterday\": SUBACK %v %q, want a refusal naming the forms", ack.ReasonCodes, ack.Properties.ReasonString)
	}
}

// caseReplayPrefix311 (R06): a 3.1.1 client asks for a replay with the
// $replay/<from>/ filter prefix and gets history, then live messages.
func caseReplayPrefix311(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	topics := []string{"r06/a", "r06/b"}
	mustPublishSeq(t, s.Addr, "r06-pub", "m", topics, 0, 10)
	c := newReplayClient(t, s.Addr, "r06-sub", packet.V311, true, 0)
	ack := c.subscribe(1, mqtt.ReplayPrefix+"-1h/r06/#", "")
	if ack.ReasonCodes[0] != packet.ReasonCode(packet.QoS1) {
		t.Fatalf("SUBACK %v, want QoS 1 granted", ack.ReasonCodes)
	}
	c.takeUntil(10)
	mustPublishSeq(t, s.Addr, "r06-pub", "m", topics, 10, 15)
	c.expectExactly(seqOf("m", 0, 15))
	bad := c.subscribe(2, mqtt.ReplayPrefix+"soon/r06/#", "")
	if bad.ReasonCodes[0] != 0x80 {
		t.Fatalf("$replay/soon/: SUBACK %v, want 0x80", bad.ReasonCodes)
	}
}

// caseEmbeddedAppAndMQTT (R07): an application embedding the broker
// publishes in process and an MQTT subscriber receives it; an MQTT client
// publishes and the application's in-process subscription receives it,
// with its position, and a second one resumes after that position.
func caseEmbeddedAppAndMQTT(t T, tg Target) {
	s := startBroker(t, tg, replayHistory)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	sub := newReplayClient(t, s.Addr, "r07-sub", packet.V5, true, 0)
	wantGranted(t, sub.subscribe(1, "r07/app/#", ""))
	for i := range 3 {
		m := mqtt.Message{Topic: "r07/app/x", QoS: 1, Payload: []byte(fmt.Sprintf("app%03d", i))}
		if err := s.Broker().Publish(ctx, m); err != nil {
			t.Fatalf("publish in process: %v", err)
		}
	}
	sub.takeUntil(3)
	if got := sub.payloads(); !equalStrings(got, seqOf("app", 0, 3)) {
		t.Fatalf("MQTT subscriber took %s, want app000..app002", abbrev(got))
	}

	got := make(chan mqtt.Delivery, 64)
	in, err := s.Broker().Subscribe(ctx, "r07/dev/#", mqtt.SubscribeOptions{}, func(d mqtt.Delivery) error {
		got <- d
		return nil
	})
	if err != nil {
		t.Fatalf("subscribe in process: %v", err)
	}
	defer in.Close()
	mustPublishSeq(t, s.Addr, "r07-pub", "dev", []string{"r07/dev/a", "r07/dev/b"}, 0, 5)
	take := func(ch <-chan mqtt.Delivery, n int) []mqtt.Delivery {
		t.Helper()
		var ds []mqtt.Delivery
		for len(ds) < n {
			select {
			case d := <-ch:
				ds = append(ds, d)
			case <-ctx.Done():
				t.Fatalf("in-process subscription took %d of %d messages", len(ds), n)
			}
		}
		return ds
	}
	ds := take(got, 5)
	for i, d := range ds {
		if want := fmt.Sprintf("dev%03d", i); string(d.Payload) != want || d.Position == "" {
			t.Fatalf("in-process delivery %d: %q at %q, want %s with a position", i, d.Payload, d.Position, want)
		}
	}
	resumed := make(chan mqtt.Delivery, 64)
	again, err := s.Broker().Subscribe(ctx, "r07/dev/#", mqtt.SubscribeOptions{From: ds[1].Position}, func(d mqtt.Delivery) error {
		resumed <- d
		return nil
	})
	if err != nil {
		t.Fatalf("subscribe in process from %s: %v", ds[1].Position, err)
	}
	defer again.Close()
	for i, d := range take(resumed, 3) {
		if want := fmt.Sprintf("dev%03d", i+2); string(d.Payload) != want {
			t.Fatalf("resumed delivery %d: %q, want %s", i, d.Payload, want)
		}
	}
	select {
	case d := <-resumed:
		t.Fatalf("resumed subscription took %q beyond the published messages", d.Payload)
	case <-time.After(quiet):
	}
}
