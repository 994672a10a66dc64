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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openTestDB(t, ctx)
	addr, b := serveTestBroker(t, db, Options{MaxInflight: 20})
	connect := func(id string, onMsg paho3.MessageHandler) paho3.Client {
		t.Helper()
		cl := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
			SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false).
			SetDefaultPublishHandler(onMsg))
		if tok := cl.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: connect: %v", id, tok.Error())
		}
		return cl
	}
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
