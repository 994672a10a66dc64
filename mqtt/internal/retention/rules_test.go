package retention_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/retention"
	"github.com/tidemark-io/tidemark/table"
	"github.com/tidemark-io/tidemark/table/tabletest"
)

const msgs = "test.msgs"

func publish(t *testing.T, db *table.DB, topic string, n int) {
	t.Helper()
	for i := range n {
		tx := db.Begin()
		if err := tx.Message(msgs, topic, fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSetFloorAfterSeed checks the Set's invariant on a real log: before
// Seed, Floor reports nothing, so retention removes nothing; after it, a
// count rule keeps at least its newest messages above the floor, counting
// both what the seeding read found and what the router observed.
func TestSetFloorAfterSeed(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	publish(t, db, "other/x", 3)
	publish(t, db, "keep/a", 10)
	rules, err := retention.Parse("keep/#=4msgs")
	if err != nil {
		t.Fatal(err)
	}
	s := retention.NewSet(msgs, rules)
	head, err := db.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Start(head)
	if _, ok := s.Floor(time.Now(), head); ok {
		t.Fatal("Floor reported a cursor before Seed")
	}
	if err := s.Seed(ctx, db); err != nil {
		t.Fatal(err)
	}
	floor, ok := s.Floor(time.Now(), head)
	if !ok {
		t.Fatal("no floor after Seed")
	}
	// The newest 4 of keep/a's 10 messages are the last 4 log entries.
	if lowest := head.Key - 3; floor.Key >= lowest {
		t.Fatalf("floor %d would drop the kept message at %d", floor.Key, lowest)
	}
	st := s.Stats(time.Now())
	if len(st) != 1 || st[0].Messages < 4 || st[0].Messages > 10 {
		t.Fatalf("stats %+v, want the rule keeping 4 to 10 messages", st)
	}
}

// TestInfoReadsSavedRules checks that Info reports the rules Save stored,
// and nothing once Save was given none.
func TestInfoReadsSavedRules(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	publish(t, db, "keep/a", 5)
	rules := []retention.Rule{{Filter: "keep/#", Age: time.Hour}}
	if err := retention.Save(ctx, db, rules); err != nil {
		t.Fatal(err)
	}
	st, err := retention.Info(ctx, db, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Rule != rules[0] || st[0].Messages != 5 {
		t.Fatalf("Info = %+v, want the saved rule keeping 5 messages", st)
	}
	if err := retention.Save(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := retention.Info(ctx, db, msgs); err != nil || st != nil {
		t.Fatalf("Info after removing the rules = %+v, %v", st, err)
	}
	if err := (retention.Rule{Filter: "a/#"}).Check(); !errors.Is(err, retention.ErrRule) {
		t.Fatalf("Check of a rule keeping nothing = %v, want ErrRule", err)
	}
}
