package mqtt_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
)

// logText is a broker's log, for a test to wait for a line.
type logText struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count reports how many lines hold s.
func (l *logText) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// String returns the log so far.
func (l *logText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// waitFor waits until the log has n lines holding s.
func (l *logText) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	for deadline := time.Now().Add(wait); l.count(s) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after %s:\n%s", s, wait, l)
		}
	}
}

func (l *logText) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// expectSplit checks that the two members of a group got n messages in
// all, each some, and no more.
func expectSplit(t *testing.T, n int, m1, m2 *client5) {
	t.Helper()
	got := [2]int{}
	deadline := time.After(wait)
	for got[0]+got[1] < n {
		select {
		case <-m1.msgs:
			got[0]++
		case <-m2.msgs:
			got[1]++
		case <-deadline:
			t.Fatalf("the group got %d of %d messages: %v", got[0]+got[1], n, got)
		}
	}
	m1.expectNone(300 * time.Millisecond)
	m2.expectNone(0)
	if got[0] == 0 || got[1] == 0 {
		t.Fatalf("one member got all %d messages: %v", n, got)
	}
}

// A shared subscription with a member on each of two nodes sharing one
// store gets each message once, not once per node: the nodes publish
// their members in their presence records, and one pick, made alike on
// both, decides which node delivers. Once one node's member has gone, the
// other's gets everything.
func TestSharedSubscriptionAcrossNodes(t *testing.T) {
	var logA, logB logText
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.Logger = "A", logA.logger() })
	bAddr := startNode(t, a.DB(), "B", func(o *mqtt.Options) { o.Logger = logB.logger() })
	const spans = "served by several nodes"

	m1 := connect5(t, a.Addr, "share-m1", true, 0)
	m2 := connect5(t, bAddr, "share-m2", true, 0)
	m1.sub("$share/g/sn/#", 1)
	m2.sub("$share/g/sn/#", 1)
	logA.waitFor(t, spans, 1)
	logB.waitFor(t, spans, 1)

	pubA := connect5(t, a.Addr, "share-pa", true, 0)
	pubB := connect5(t, bAddr, "share-pb", true, 0)
	const n = 40
	for i := range n {
		p := pubA
		if i%2 == 1 {
			p = pubB
		}
		p.pub("sn/x", 1, false, "m")
	}
	expectSplit(t, n, m1, m2)

	m2.close()
	const single = "served by one node again"
	logA.waitFor(t, single, 1)
	logB.waitFor(t, single, 1)
	for range 10 {
		pubB.pub("sn/y", 1, false, "after")
	}
	m1.expect(10)
	m1.expectNone(300 * time.Millisecond)
}

// QoS 0 messages reach the sessions of every node sharing the store, not
// only those of the node they were published on, each once: a plain
// subscriber on either node, a QoS 1 subscription on the publisher's
// node, a shared group with a member on each, and a QoS 0 will.
func TestQoS0AcrossNodes(t *testing.T) {
	var logA, logB logText
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.Logger = "A", logA.logger() })
	bAddr := startNode(t, a.DB(), "B", func(o *mqtt.Options) { o.Logger = logB.logger() })

	subA := connect5(t, a.Addr, "q0-subA", true, 0)
	subA.sub("q0/#", 1)
	subB := connect5(t, bAddr, "q0-subB", true, 0)
	subB.sub("q0/#", 0)
	m1 := connect5(t, a.Addr, "q0-m1", true, 0)
	m2 := connect5(t, bAddr, "q0-m2", true, 0)
	m1.sub("$share/g/q0s/#", 0)
	m2.sub("$share/g/q0s/#", 0)
	logA.waitFor(t, "served by several nodes", 1)
	logB.waitFor(t, "served by several nodes", 1)

	pub := connect5(t, a.Addr, "q0-pub", true, 0)
	for i := range 5 {
		pub.pub("q0/x", 0, false, fmt.Sprint(i))
	}
	for _, c := range []*client5{subA, subB} {
		for i, m := range c.expect(5) {
			if m.QoS != 0 || string(m.Payload) != fmt.Sprint(i) {
				t.Fatalf("%s: message %d: QoS %d %q, want QoS 0 %q", c.ClientID(), i, m.QoS, m.Payload, fmt.Sprint(i))
			}
		}
	}
	subA.expectNone(200 * time.Millisecond)
	subB.expectNone(0)

	const n = 40
	for range n {
		pub.pub("q0s/x", 0, false, "s")
	}
	expectSplit(t, n, m1, m2)

	will := &paho.Connect{ClientID: "q0-will", CleanStart: true, KeepAlive: 30, WillMessage: &paho.WillMessage{Topic: "q0/will", QoS: 0, Payload: []byte("gone")}}
	w, err := dial5(t, bAddr, will, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Disconnect(&paho.Disconnect{ReasonCode: 0x04}) // with the will
	subA.expectOne("q0/will", "gone")
	subB.expectOne("q0/will", "gone")
}

// A replay on a cluster skips QoS 0 messages, which pass through the log
// there: at most once, they are never replayed (docs/replay.md).
func TestReplaySkipsQoS0OfNodes(t *testing.T) {
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.History = "A", time.Hour })
	pub := connect5(t, a.Addr, "rq0-pub", true, 0)
	pub.pub("rq0/x", 0, false, "zero")
	pub.pub("rq0/x", 1, false, "one")
	pub.pub("rq0/x", 0, false, "zero again")
	pub.pub("rq0/x", 2, false, "two")
	sub := connect5(t, a.Addr, "rq0-sub", true, 0)
	sub.sub("$replay/-1h/rq0/#", 1)
	if got := topics5(sub.expect(2)); !slices.Equal(got, []string{"rq0/x=one", "rq0/x=two"}) {
		t.Fatalf("replayed %v, want the QoS 1 and 2 messages only", got)
	}
	sub.expectNone(200 * time.Millisecond)
}

// A node that stops with a client's delayed will pending leaves the will
// in the session record; another node publishes it once the stopped
// node's presence record has stood still for 10 s, without waiting for
// the node to start again (which it may never do).
func TestWillOfStoppedNodePublishedByAnother(t *testing.T) {
	var logA logText
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.Logger = "A", logA.logger() })
	bAddr, b := serveNode(t, a.DB(), mqtt.Options{NodeID: "B"})

	sub := connect5(t, a.Addr, "gone-sub", true, 0)
	sub.sub("gone/#", 1)
	cp := &paho.Connect{ClientID: "gone-dev", CleanStart: true, KeepAlive: 30,
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: u32(3600)},
		WillMessage:    &paho.WillMessage{Topic: "gone/dev", Payload: []byte("offline"), QoS: 1},
		WillProperties: &paho.WillProperties{WillDelayInterval: u32(1)}}
	if _, err := dial5(t, bAddr, cp, nil); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	_ = b.Close() // the device's connection ends with node B, before its will is due
	select {
	case m := <-sub.msgs:
		if m.Topic != "gone/dev" || string(m.Payload) != "offline" {
			t.Fatalf("got %q %q, want the will", m.Topic, m.Payload)
		}
		if d := time.Since(stopped); d < 5*time.Second {
			t.Fatalf("the will came %v after node B stopped: before any node could know B was gone", d)
		}
	case <-time.After(3 * wait):
		t.Fatalf("the will of a client of stopped node B was not published:\n%s", logA.buf.String())
	}
	sub.expectNone(500 * time.Millisecond)
	if logA.count("its sessions recovered here") != 1 {
		t.Fatalf("node A does not log the recovery once:\n%s", logA.buf.String())
	}
}

// A second node with the id of a running one is refused, naming the fix;
// once that node has stopped, its id is free for its next start.
func TestNodeIDInUseRefused(t *testing.T) {
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID = "A" })
	time.Sleep(time.Second) // a beat or two: the record exists and changes
	_, err := mqtt.New(a.DB(), mqtt.Options{NodeID: "A"})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), `node id "A" is in use`) || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("a second node A: %v, want ErrInvalidOption naming the id and --node-id", err)
	}
	if err := a.Broker().Close(); err != nil {
		t.Fatal(err)
	}
	b, err := mqtt.New(a.DB(), mqtt.Options{NodeID: "A"})
	if err != nil {
		t.Fatalf("node A after the first stopped: %v", err)
	}
	_ = b.Close()
}

// A node that crashed left its shares record: restarted, it replaces the
// record at its first beat, so the other nodes do not keep picking it for
// members it no longer has (every message picked for it would be lost).
func TestStaleSharesRecordReplaced(t *testing.T) {
	var logA logText
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.Logger = "A", logA.logger() })
	// Node B's shares record as a crash left it: 5 members of g/st/#
	// (group, filter and count, each length-prefixed as stored).
	stale := append([]byte{1, 'g', 4}, "st/#"...)
	stale = append(stale, 5)
	tx := a.DB().Begin()
	if err := tx.PutStateUnchecked("mqtt.nodes", "B\x00shares", stale); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	m1 := connect5(t, a.Addr, "stale-m1", true, 0)
	m1.sub("$share/g/st/#", 1)
	startNode(t, a.DB(), "B")   // restarted, with no member of the group
	time.Sleep(3 * time.Second) // a few beats of both nodes
	pub := connect5(t, a.Addr, "stale-pub", true, 0)
	for range 20 {
		pub.pub("st/x", 1, false, "m")
	}
	m1.expect(20)
	m1.expectNone(200 * time.Millisecond)
}
