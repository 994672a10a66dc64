package queuelimit_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/queuelimit"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
	"github.com/tidemark-io/tidemark/table/tabletest"
)

func publish(t *testing.T, db *table.DB, topic string, n int) {
	t.Helper()
	for range n {
		m := message.Message{Topic: topic, QoS: 1, Payload: []byte("0123456789")}
		enc, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		tx := db.Begin()
		if err := tx.Message(message.LogTable, topic, enc); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// record reads client's session record through the session store.
func record(t *testing.T, db *table.DB, client string) session.Record {
	t.Helper()
	s, _, ok, err := (&session.Store{DB: db}).Load(context.Background(), client)
	if err != nil || !ok {
		t.Fatalf("session %q: present %v, %v", client, ok, err)
	}
	return s
}

// TestLimitKeepsNewestOwn: an offline session over the message limit
// keeps its newest limit messages (its checkpoint moves to just before
// them), counted as dropped; an offline session of another topic with
// none of its own moves up without a loss; an online session and one
// whose move the broker refuses are not touched.
func TestLimitKeepsNewestOwn(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	head, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	subs := func(f string) []session.Sub { return []session.Sub{{Filter: f, QoS: 1}} }
	for client, s := range map[string]*session.Record{
		"behind": {Version: packet.V311, Expiry: session.NeverExpires, Checkpoint: logpos.One(head), Subs: subs("a/#")},
		"other":  {Version: packet.V311, Expiry: session.NeverExpires, Checkpoint: logpos.One(head), Subs: subs("b/#")},
		"online": {Version: packet.V311, Expiry: session.NeverExpires, Checkpoint: logpos.One(head), Subs: subs("a/#")},
		"held":   {Version: packet.V311, Expiry: session.NeverExpires, Checkpoint: logpos.One(head), Subs: subs("a/#")},
	} {
		tx := db.Begin()
		if err := session.Put(tx, client, s); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, db, "a/x", 10)
	if head, err = db.Head(ctx); err != nil {
		t.Fatal(err)
	}
	var c counters.Counters
	cuts := 0
	l := &queuelimit.Limiter{
		DB: db, Log: slog.New(slog.DiscardHandler), Counters: &c, MaxMessages: 3,
		Online: func(client string, _ int, cp table.Cursor) (table.Cursor, bool) { return cp, client == "online" },
		BeginCut: func(client string) (func(), bool) {
			if client == "held" {
				return nil, false // connected meanwhile
			}
			cuts++
			return func() {}, true
		},
	}
	// The first pass counts the log from where it finds its head; the
	// second sees the ten messages.
	for range 2 {
		if err := l.Limit(ctx, head); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.DroppedRetention.Load(); got != 7 {
		t.Fatalf("dropped %d messages, want 7 (10 queued, limit 3)", got)
	}
	// "behind" resumes with its three newest: exactly three own messages
	// lie after its checkpoint.
	own := 0
	cp := record(t, db, "behind").Checkpoint.Of(0)
	if _, err := db.Follow(ctx, table.SubscribeOptions{Table: message.LogTable, Start: cp, IncludeSuperseded: true, Composite: true,
		Hooks: table.Hooks{Live: func() bool { return false }}}, func(table.Event) error { own++; return nil }); err != nil {
		t.Fatal(err)
	}
	if own != 3 {
		t.Fatalf("%d messages after the moved checkpoint, want 3", own)
	}
	if got := record(t, db, "other").Checkpoint.Of(0); got != head {
		t.Fatalf("a session with no message of its own left at %v, want moved up to the head %v", got, head)
	}
	for _, client := range []string{"online", "held"} {
		if got := record(t, db, client).Checkpoint.Of(0); got == head || !got.Less(cp) {
			t.Fatalf("%s moved to %v", client, got)
		}
	}
	if cuts != 2 {
		t.Fatalf("%d moves registered, want 2 (behind, other)", cuts)
	}
}
