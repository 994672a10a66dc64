package table_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// A live reader that has read every entry of a transaction goes on past
// a truncation of that transaction: retention removed nothing it still
// needs, whatever the transaction's entry count.
func TestLiveReaderPastTruncatedTransaction(t *testing.T) {
	db, _ := openDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	head, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: head, IncludeSuperseded: true, Composite: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	var truncations atomic.Int32
	logs := writerFunc(func(p []byte) (int, error) {
		if bytes.Contains(p, []byte("truncated")) {
			truncations.Add(1)
		}
		return len(p), nil
	})
	routed := make(chan string, 16)
	f, err := db.NewFanout(ctx, table.FanoutOptions{Table: "t", Start: head,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Route:  func(ev table.Event, _ func(*table.Member)) { routed <- ev.ID }})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.Join(head, nil) // a member, so a truncation past the follower would be a warning
	defer m.Close()

	next := func(want string) table.Event {
		t.Helper()
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				<-sub.Done()
				t.Fatalf("subscription ended waiting for %q: %v", want, sub.Err())
			}
			if ev.ID != want {
				t.Fatalf("subscription got %q, want %q", ev.ID, want)
			}
			if err := sub.Ack(ev); err != nil {
				t.Fatal(err)
			}
			return ev
		case <-sub.Done():
			t.Fatalf("subscription ended waiting for %q: %v", want, sub.Err())
		case <-ctx.Done():
			t.Fatalf("no event %q", want)
		}
		return table.Event{}
	}
	nextRouted := func(want string) {
		t.Helper()
		select {
		case id := <-routed:
			if id != want {
				t.Fatalf("fanout routed %q, want %q", id, want)
			}
		case <-ctx.Done():
			t.Fatalf("fanout routed no %q", want)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		put(t, db, "t", id, "v")
		ev := next(id)
		nextRouted(id)
		// Both readers are live and past every entry of ev's
		// transaction: retention takes it whole.
		if err := db.TruncateBelow(ctx, ev.Cursor()); err != nil {
			t.Fatal(err)
		}
	}
	put(t, db, "t", "d", "v")
	next("d")
	nextRouted("d")
	if n := truncations.Load(); n > 0 {
		t.Fatalf("the fanout follower logged %d truncations of entries it had routed", n)
	}
}

// writerFunc is an io.Writer made of a function: a log handler's writes,
// one record each.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
