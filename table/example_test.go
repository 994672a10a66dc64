package table_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Records written in one transaction, read back from a consistent view,
// and followed as a change feed from the start of the log.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tidemark-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	// Both records or neither.
	err = db.Update(ctx, func(tx *table.Tx) error {
		if err := tx.Put("devices", "d1", []byte("kitchen")); err != nil {
			return err
		}
		return tx.Put("devices", "d2", []byte("hall"))
	})
	if err != nil {
		log.Fatal(err)
	}

	err = db.View(ctx, func(v *table.View) error {
		return v.Range("devices", "", func(r table.Record) bool {
			fmt.Printf("%s = %s\n", r.ID, r.Value)
			return true
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	// The change feed: the zero Start replays the retained log, then
	// the subscription goes on live.
	sub, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "devices"})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for range 2 {
		ev := <-sub.Events()
		fmt.Printf("%s %s %s\n", ev.Op, ev.ID, ev.Value)
		_ = sub.Ack(ev)
	}
	// Output:
	// d1 = kitchen
	// d2 = hall
	// put d1 kitchen
	// put d2 hall
}

// Tables split over three engines: each device's record lives in its
// partition, commits to different partitions never wait for one another,
// and one subscription follows them all, resuming from one checkpoint per
// partition.
func ExampleOpenPartitions() {
	ctx := context.Background()
	var es []engine.Engine
	for range 3 {
		dir, err := os.MkdirTemp("", "tidemark-example")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
		if err != nil {
			log.Fatal(err)
		}
		defer e.Close()
		es = append(es, e)
	}
	p, err := table.OpenPartitions(ctx, es, table.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		// A transaction commits within the partition of its key.
		err := p.For(id).Update(ctx, func(tx *table.Tx) error {
			return tx.Put("devices", id, []byte("online"))
		})
		if err != nil {
			log.Fatal(err)
		}
	}

	sub, err := p.Subscribe(ctx, make(table.Cursors, p.Count()), table.SubscribeOptions{Table: "devices"})
	if err != nil {
		log.Fatal(err)
	}
	seen := map[string]int{}
	for range 4 {
		ev := <-sub.Events()
		seen[ev.ID] = sub.Partition(ev)
		_ = sub.Ack(ev)
	}
	_ = sub.Close()
	fmt.Println(seen)
	// A durable consumer persists this and resumes from it.
	fmt.Println(len(sub.Checkpoint()), "cursors")
	// Output:
	// map[d1:0 d2:2 d3:1 d4:2]
	// 3 cursors
}
