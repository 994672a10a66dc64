package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// TestSessionRowsMatchRecord: a commit that rewrites a session's record
// and sweeps its completion marks (the late checkpoint of a node that
// held the session and died) lands after a CONNECT read the record and
// before it read the rows. The CONNECT must read both again: the older
// checkpoint with the marks gone would deliver completed QoS 2 messages
// a second time.
func TestSessionRowsMatchRecord(t *testing.T) {
	ctx, db := hookedTestDB(t)

	// An offline session with one QoS 2 delivery completed above its
	// checkpoint.
	head, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mtx := db.Begin()
	_ = mtx.Message("other", "m", []byte("x"))
	if err := mtx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mark, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := session.Record{Version: packet.V311, Expiry: session.NeverExpires, Checkpoint: logpos.One(head), SentHigh: logpos.One(mark)}
	tx := db.Begin()
	_ = tx.PutStateUnchecked(tableDone, "s"+slotSep+mark.String(), nil)
	if err := session.Put(tx, "s", &rec); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var reads atomic.Int32
	hooks := Hooks{At: func(p Point, client string, _ uint16) {
		if p != PointSessionRead || client != "s" || reads.Add(1) != 1 {
			return
		}
		moved := rec
		moved.Checkpoint = logpos.One(mark)
		tx := db.Begin()
		_ = tx.DeleteStateUnchecked(tableDone, "s"+slotSep+mark.String())
		if err := session.Put(tx, "s", &moved); err != nil {
			t.Error(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Error(err)
		}
	}}
	addr, _ := serveTestBroker(t, db, Options{Hooks: hooks})

	c := paho3.NewClient(paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("s").
		SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false))
	tok := c.Connect()
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(100)
	if !tok.(*paho3.ConnectToken).SessionPresent() {
		t.Fatal("CONNACK says no session present")
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("the session record was read %d times; want 2: the rows read after a rewrite must be read again with the record", n)
	}
}

// TestStaleDiscardDeletesNothing discards a session with more rows than one
// commit takes, based on a read of its record that a later write made
// stale (as an expiry judged on a node behind the store would). No commit
// of the discard may apply: the session came back, and its rows are its
// state.
func TestStaleDiscardDeletesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openTestDB(t, ctx)
	b, err := New(table.OnePartition(db), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	rows := b.maxStateDeletes() + 100 // two commits' worth
	for i := 0; i < rows; i += 1000 {
		tx := db.Begin()
		for j := i; j < min(i+1000, rows); j++ {
			_ = tx.PutStateUnchecked(tableDone, fmt.Sprintf("s%s%08d", slotSep, j), nil)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	put := func(rec session.Record) table.Version {
		tx := db.Begin()
		if err := session.Put(tx, "s", &rec); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return tx.Version()
	}
	count := func() int {
		n := 0
		if err := db.Range(ctx, tableDone, "s"+slotSep, func(table.Record) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stale := put(session.Record{Version: packet.V311, Expiry: session.NeverExpires})
	current := put(session.Record{Version: packet.V311, Expiry: session.NeverExpires, Online: true})

	if err := b.storeFor("s").DiscardIfAt(ctx, "s", stale); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("discard on a stale read: %v, want a conflict", err)
	}
	if n := count(); n != rows {
		t.Fatalf("a discard on a stale read deleted %d of the session's %d rows", rows-n, rows)
	}
	if _, err := db.Get(ctx, session.Table, "s"); err != nil {
		t.Fatalf("session record after a stale discard: %v", err)
	}

	if err := b.storeFor("s").DiscardIfAt(ctx, "s", current); err != nil {
		t.Fatalf("discard on a current read: %v", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows left after the discard", n)
	}
	if _, err := db.Get(ctx, session.Table, "s"); !errors.Is(err, table.ErrNotFound) {
		t.Fatalf("session record after the discard: %v, want not found", err)
	}
}
