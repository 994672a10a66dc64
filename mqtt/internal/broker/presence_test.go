package broker

import (
	"bytes"
	"context"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestClaimFromSilentNode: a session left online by a node whose presence
// record no longer changes (it crashed) is taken over without waiting out
// the takeover timeout, here an hour; a running node's record changes.
func TestClaimFromSilentNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openTestDB(t, ctx)

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

	addr, _ := serveTestBroker(t, db, Options{NodeID: "A", TakeoverTimeout: time.Hour})

	c := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("held").
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
