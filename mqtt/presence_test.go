package mqtt

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// TestClaimFromSilentNode: a session left online by a node whose presence
// record no longer changes (it crashed) is taken over without waiting out
// the takeover timeout, here an hour; a running node's record changes.
func TestClaimFromSilentNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// A crashed node's leftovers: its last presence record and a session
	// it held.
	tx := db.Begin()
	_ = tx.PutStateUnchecked(tableNodes, "ghost", []byte("last beat"))
	if err := session.Put(tx, "held", &session.Record{Version: packet.V311, Expiry: session.NeverExpires, Online: true, Node: "ghost", Conn: "gone"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	b, err := New(db, Options{NodeID: "A", TakeoverTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = b.Serve(ln) }()
	defer func() { _ = b.Close(); <-served }()

	c := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + ln.Addr().String()).SetClientID("held").
		SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(30 * time.Second))
	tok := c.Connect()
	if !tok.WaitTimeout(40*time.Second) || tok.Error() != nil {
		t.Fatalf("connect of a session held by a silent node: %v (waited for its hand-over?)", tok.Error())
	}
	defer c.Disconnect(100)
	if !tok.(*paho3.ConnectToken).SessionPresent() {
		t.Fatal("the session was not taken over: CONNACK says no session present")
	}

	// This node beats: its record changes within a few beats.
	first, err := db.Get(ctx, tableNodes, "A")
	if err != nil {
		t.Fatalf("presence record of A: %v", err)
	}
	for {
		time.Sleep(nodeBeat / 2)
		now, err := db.Get(ctx, tableNodes, "A")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(now.Value, first.Value) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the presence record of a running node did not change")
		}
	}
}
