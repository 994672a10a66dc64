//go:build !nopebble

package pebble

import (
	"context"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// TestBlockCacheBesideMemtables checks that blocks stay cached once the
// memtables are full: Pebble reserves their size in the block cache, and
// a cache no larger than they are cached nothing, so that every check of
// a commit read its table's filter and index blocks from the file.
func TestBlockCacheBesideMemtables(t *testing.T) {
	ctx := context.Background()
	e, err := open(ctx, driver.Options{Dir: t.TempDir(), Sync: driver.SyncNone,
		Params: map[string]string{"cache_mb": "1", "memtable_mb": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d := e.(*db)
	// Enough to fill memtables of the full size and flush some to tables.
	val := make([]byte, 200)
	for i := range 40000 {
		b := new(driver.Batch).Put([]byte(fmt.Sprintf("k/%08d", i)), val)
		h, err := d.Submit(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.pdb.Flush(); err != nil {
		t.Fatal(err)
	}
	// Absent keys inside the tables' range: each read consults a filter.
	for range 3 {
		for i := range 2000 {
			key := kvlog.DataKey(nil, []byte(fmt.Sprintf("k/%08d-absent", i*20)))
			if _, _, err := d.pointGet(key); err != nil {
				t.Fatal(err)
			}
		}
	}
	m := d.pdb.Metrics()
	if m.Flush.Count == 0 {
		t.Fatalf("no memtable was flushed: the reads did not reach a table\n%s", m)
	}
	if m.BlockCache.Hits == 0 || m.BlockCache.Count == 0 {
		t.Fatalf("block cache: %d hits, %d misses, %d blocks held after reading the same blocks three times; want them cached (memtables reserved in the cache left no room for blocks)",
			m.BlockCache.Hits, m.BlockCache.Misses, m.BlockCache.Count)
	}
}
