//go:build !nopebble

package pebble

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// scanAll lists the entries ScanLog returns from from.
func scanAll(t *testing.T, d *db, from driver.LogKey, exclusive bool) []driver.Entry {
	t.Helper()
	var out []driver.Entry
	if err := d.ScanLog(context.Background(), from, exclusive, func(e driver.Entry) bool {
		out = append(out, e)
		if len(out) > 1<<16 {
			t.Fatalf("scan from %v returned more entries than were committed", from)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Scans answered from the recent entries return what a scan of the store
// returns, from every position, across the trims that drop its older
// half, and past a reset that leaves it covering nothing.
func TestRecentLogMatchesStore(t *testing.T) {
	for _, mode := range []driver.SyncMode{driver.SyncNone, driver.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			eng, err := open(ctx, driver.Options{Dir: t.TempDir(), Sync: mode})
			if err != nil {
				t.Fatal(err)
			}
			d := eng.(*db)
			defer d.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			var keys []driver.LogKey
			for i := range 5000 {
				if i == 4000 {
					d.recent.reset() // as after a failed apply
				}
				var b driver.Batch
				for j := range 1 + rng.IntN(3) {
					b.Append(fmt.Appendf(nil, "entry %d.%d", i, j))
				}
				h, err := d.Submit(ctx, &b)
				if err != nil {
					t.Fatal(err)
				}
				res, err := h.Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, res.Keys[0])
				if i == 3999 && (len(d.recent.entries) > recentMaxEntries || d.recent.entries[0].entry.Key == keys[0]) {
					t.Fatalf("%d recent entries from the first commit on: never trimmed", len(d.recent.entries))
				}
			}
			if n := len(d.recent.entries); n == 0 || n > recentMaxEntries {
				t.Fatalf("recent entries after 5000 commits: %d, want 1..%d", n, recentMaxEntries)
			}
			for _, i := range []int{0, 1500, 2500, 3999, 4000, 4001, 4500, 4998, 4999} {
				for _, exclusive := range []bool{false, true} {
					got := scanAll(t, d, keys[i], exclusive)
					held := d.recent.entries
					d.recent.entries = nil // the store alone
					want := scanAll(t, d, keys[i], exclusive)
					d.recent.entries = held
					if len(want) == 0 && !exclusive {
						t.Fatalf("scan from commit %d found nothing", i)
					}
					if !slices.EqualFunc(got, want, func(a, b driver.Entry) bool {
						return a.Key == b.Key && a.Index == b.Index && a.Count == b.Count && string(a.Value) == string(b.Value)
					}) {
						t.Fatalf("scan from commit %d (exclusive %v): %d entries with the recent ones, %d from the store", i, exclusive, len(got), len(want))
					}
				}
			}
			// A page is served from memory once the scan starts at or after
			// the oldest held entry.
			if _, _, ok := d.recent.page(d.recent.entries[0].key[:], driver.LogKey(d.durable.Load()), scanPage); !ok {
				t.Fatal("a scan from the oldest held entry is not covered")
			}
			if _, _, ok := d.recent.page([]byte{d.recent.entries[0].key[0]}, driver.LogKey(d.durable.Load()), scanPage); ok {
				t.Fatal("a scan from before the held entries is covered")
			}
		})
	}
}
