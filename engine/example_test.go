package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble" // registers "pebble"
)

// One atomic commit of two keys and two log entries, read back from a
// snapshot and from the change log.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tidemark-engine-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	b := new(engine.Batch).
		Put([]byte("k1"), []byte("v1")).
		Put([]byte("k2"), []byte("v2")).
		Append([]byte("wrote k1")).
		Append([]byte("wrote k2"))
	// Commit submits the batch and waits until it is durable.
	if _, err := engine.Commit(ctx, e, b); err != nil {
		log.Fatal(err)
	}

	v, err := engine.Get(ctx, e, []byte("k2"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("k2 = %s\n", v)
	err = e.ScanLog(ctx, 0, false, func(en engine.Entry) bool {
		fmt.Printf("log: %s (last of its key: %v)\n", en.Value, en.Last())
		return true
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// k2 = v2
	// log: wrote k1 (last of its key: false)
	// log: wrote k2 (last of its key: true)
}
