package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// RecentScans runs CheckRecentScans under SyncNone and SyncAlways on the
// engine open returns for t's directory, with the buffer it keeps its
// latest entries in and a reset of that buffer under the engine's commit
// lock.
func RecentScans(t *testing.T, open func(dir string, mode driver.SyncMode) (e driver.Engine, recent *kvlog.Recent, reset func())) {
	for _, mode := range []driver.SyncMode{driver.SyncNone, driver.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			e, recent, reset := open(t.TempDir(), mode)
			defer e.Close()
			CheckRecentScans(t, e, recent, reset)
		})
	}
}

// CheckRecentScans commits 5,000 transactions of one to three log entries
// to e, an engine that gives a transaction's entries one shared key and
// keeps its latest entries in recent, calling reset (as after a failed
// write) after the first 4,000. Scans from the oldest commit, from commits
// across the trims of recent and across the reset, inclusive and
// exclusive, must return exactly the entries committed from there on,
// whether recent answers them or the store does.
func CheckRecentScans(t TB, e driver.Engine, recent *kvlog.Recent, reset func()) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var all []driver.Entry // every entry committed, in log order
	var first []int        // index in all of each commit's first entry
	for i := range 5000 {
		if i == 4000 {
			reset()
			if recent.Len() != 0 {
				t.Fatalf("%d recent entries after a reset", recent.Len())
			}
		}
		var b driver.Batch
		n := 1 + rng.IntN(3)
		for j := range n {
			b.Append(fmt.Appendf(nil, "entry %d.%d", i, j))
		}
		h, err := e.Submit(ctx, &b)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil {
			t.Fatalf("commit: %v", err)
		}
		first = append(first, len(all))
		for j := range n {
			all = append(all, driver.Entry{Key: res.Keys[j], Index: uint32(j), Count: uint32(n), Value: b.Log[j]})
		}
	}
	if n := recent.Len(); n == 0 || n > 4096 {
		t.Fatalf("%d recent entries after 5,000 commits, want 1..4096", n)
	}
	for _, i := range []int{0, 1500, 2500, 3999, 4000, 4001, 4500, 4998, 4999} {
		for _, exclusive := range []bool{false, true} {
			from := all[first[i]].Key
			var got []driver.Entry
			if err := e.ScanLog(ctx, from, exclusive, func(en driver.Entry) bool {
				got = append(got, en)
				return len(got) <= len(all)
			}); err != nil {
				t.Fatalf("scan log: %v", err)
			}
			want := all[first[i]:]
			if exclusive {
				want = slices.DeleteFunc(slices.Clone(want), func(en driver.Entry) bool { return en.Key == from })
			}
			if !slices.EqualFunc(got, want, func(a, b driver.Entry) bool {
				return a.Key == b.Key && a.Index == b.Index && a.Count == b.Count && string(a.Value) == string(b.Value)
			}) {
				t.Fatalf("scan from commit %d (exclusive %v): %d entries, want the %d committed from there", i, exclusive, len(got), len(want))
			}
		}
	}
	last := all[len(all)-1].Key
	if _, _, covered := recent.Page(nil, kvlog.LogSeek(last), last, 16); !covered {
		t.Fatalf("a scan from the latest commit is not answered from memory")
	}
}
