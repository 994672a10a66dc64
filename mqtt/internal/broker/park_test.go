package broker

import (
	"sync/atomic"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"
)

// TestParkedConnectionHoldsNoBuffers: a connection that parks as soon as
// it has handled its CONNECT and SUBSCRIBE gives back its read buffer,
// and its acknowledgement queue's array once the SUBACK went out. (Before,
// the read that found the socket empty gave the buffer back; parking at
// once makes no such read, and the SUBACK is still queued when it parks.)
func TestParkedConnectionHoldsNoBuffers(t *testing.T) {
	ctx, db := hookedTestDB(t)
	var br atomic.Pointer[Broker] // set once serving: the hook runs on the broker's goroutines
	var parks, holding atomic.Int32
	hooks := Hooks{At: func(p Point, client string, _ uint16) {
		if p != PointParked || client != "idle" {
			return
		}
		// On the read loop's goroutine, which owns the reader.
		b := br.Load()
		b.mu.Lock()
		c := b.conns[client]
		b.mu.Unlock()
		if c != nil && c.br.Holding() {
			holding.Add(1)
		}
		parks.Add(1)
	}}
	addr, b := serveTestBroker(t, db, Options{Hooks: hooks})
	br.Store(b)

	cl := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("idle").
		SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false).SetKeepAlive(time.Minute))
	if tok := cl.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer cl.Disconnect(100)
	if tok := cl.Subscribe("dev/1/cmd", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	for {
		b.mu.Lock()
		c := b.conns["idle"]
		b.mu.Unlock()
		if c != nil && parks.Load() > 0 && !c.acks.Holding() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the connection did not park with its acknowledgements drained (%d parks)", parks.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := holding.Load(); n > 0 {
		t.Fatalf("%d of %d parks kept a read buffer", n, parks.Load())
	}
}
