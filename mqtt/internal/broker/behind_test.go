package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"
)

// TestSendersBehind checks the broker's view of senders behind the log
// (delivery.Env.Behind), which makes pipelining publishers yield: it holds
// while a session catches up on a backlog, and no longer once that session
// has left, or has received everything.
func TestSendersBehind(t *testing.T) {
	ctx, b, connect := startBehindBroker(t, 20)
	waitBehind := func(want bool, when string) {
		t.Helper()
		for !b.deliv.Behind() == want {
			if ctx.Err() != nil {
				t.Fatalf("%s: Behind() stayed %v", when, !want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var mu sync.Mutex
	got := map[string]bool{}
	slow := true
	onMsg := func(_ paho3.Client, m paho3.Message) {
		mu.Lock()
		got[string(m.Payload())] = true
		s := slow
		mu.Unlock()
		if s {
			time.Sleep(time.Millisecond) // the acknowledgement waits for it
		}
	}
	sub := connect("sub", onMsg)
	if tok := sub.Subscribe("b/t", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	const n = 3000
	pub := connect("pub", nil)
	defer pub.Disconnect(100)
	var last paho3.Token
	for i := range n {
		last = pub.Publish("b/t", 1, false, fmt.Sprintf("m%d", i))
	}
	if !last.WaitTimeout(30*time.Second) || last.Error() != nil {
		t.Fatalf("publish: %v", last.Error())
	}
	if b.deliv.Behind() {
		t.Fatal("behind with no session online to send")
	}
	// A backlog of 3,000, acknowledged a millisecond apart: its sender is
	// behind, and no longer once its connection is gone.
	sub = connect("sub", onMsg)
	waitBehind(true, "a session catching up on 3,000 messages")
	sub.Disconnect(0)
	waitBehind(false, "the session behind left")
	mu.Lock()
	slow = false
	mu.Unlock()
	sub = connect("sub", onMsg)
	defer sub.Disconnect(100)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d messages", k, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitBehind(false, "every message received")
}

// TestOnlyPublishersYield checks who yields to a sender behind the log: a
// subscriber's acknowledgements free its own window, so its read loop
// never yields, however far behind its sender is; a pipelining
// publisher's read loop does.
func TestOnlyPublishersYield(t *testing.T) {
	ctx, b, connect := startBehindBroker(t, 50)
	var mu sync.Mutex
	got := map[string]bool{}
	onMsg := func(_ paho3.Client, m paho3.Message) {
		mu.Lock()
		got[string(m.Payload())] = true
		mu.Unlock()
		time.Sleep(time.Millisecond) // keeps the sender behind
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	sub := connect("sub", onMsg)
	if tok := sub.Subscribe("y/t", 2, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.Disconnect(100)
	pub := connect("pub", nil)
	defer pub.Disconnect(100)
	publish := func(topic string, qos byte, n int, tag string) {
		t.Helper()
		var last paho3.Token
		for i := range n {
			last = pub.Publish(topic, qos, false, fmt.Sprintf("%s%d", tag, i))
		}
		if !last.WaitTimeout(30*time.Second) || last.Error() != nil {
			t.Fatalf("publish: %v", last.Error())
		}
	}
	// A QoS 2 backlog of 1,500, taken by a subscriber that acknowledges
	// as fast as its client lets it: its PUBRECs come in bursts, whose
	// records share commits, all while its sender is behind.
	const n = 1500
	publish("y/t", 2, n, "a")
	sub = connect("sub", onMsg)
	sawBehind := false
	for received() < n {
		sawBehind = sawBehind || b.deliv.Behind()
		if ctx.Err() != nil {
			t.Fatalf("received %d of %d messages", received(), n)
		}
		time.Sleep(time.Millisecond)
	}
	if !sawBehind {
		t.Fatal("a session catching up on 1,500 messages never counted as behind")
	}
	if k := b.yields.Load(); k != 0 {
		t.Fatalf("a subscriber's acknowledgements yielded %d times to its own sender", k)
	}
	// The same backlog again, with a publisher pipelining QoS 1 messages
	// while the subscriber catches up: its read loop yields.
	sub.Disconnect(0)
	publish("y/t", 2, n, "b")
	sub = connect("sub", onMsg)
	defer sub.Disconnect(100)
	for b.yields.Load() == 0 {
		if received() == 2*n {
			t.Fatal("a publisher pipelining beside a sender behind the log never yielded")
		}
		publish("y/other", 1, 200, "c")
	}
}

// startBehindBroker serves a broker with a window of maxInflight and
// returns a context ending with the test (a minute at most), the broker,
// and a function connecting an MQTT 3.1.1 client with a persistent
// session, whose messages go to onMsg.
func startBehindBroker(t *testing.T, maxInflight int) (context.Context, *Broker, func(id string, onMsg paho3.MessageHandler) paho3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := openTestDB(t, ctx)
	addr, b := serveTestBroker(t, db, Options{MaxInflight: maxInflight})
	return ctx, b, func(id string, onMsg paho3.MessageHandler) paho3.Client {
		t.Helper()
		cl := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
			SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false).
			SetDefaultPublishHandler(onMsg))
		if tok := cl.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: connect: %v", id, tok.Error())
		}
		return cl
	}
}
