//go:build !nojetstream

package jetstream

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestJetStreamIndexImmutable checks the index's two promises: iteration
// in key order from any lower bound, and an old root unchanged by later
// updates (what makes a snapshot a pointer).
func TestJetStreamIndexImmutable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ix := newIndex()
	want := map[string]uint64{}
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("k%04d", rng.IntN(1500))
		ix = ix.with(k, version{seq: uint64(i + 1)})
		want[k] = uint64(i + 1)
	}
	old, oldWant := ix, maps.Clone(want)
	for i := 0; i < 500; i++ {
		k := fmt.Sprintf("k%04d", rng.IntN(3000))
		ix = ix.with(k, version{seq: uint64(10000 + i), deleted: i%3 == 0})
		want[k] = uint64(10000 + i)
	}
	// Runs of updates in edit epochs change their own nodes in place,
	// never a node an earlier root reaches.
	var mids []index
	var midWants []map[string]uint64
	for e := uint64(1); e <= 20; e++ {
		mids, midWants = append(mids, ix), append(midWants, maps.Clone(want))
		for i := 0; i < 1+rng.IntN(200); i++ {
			k := fmt.Sprintf("k%04d", rng.IntN(3000))
			seq := 20000 + e*1000 + uint64(i)
			if rng.IntN(3) == 0 {
				ix = ix.withoutIn(k, e)
				delete(want, k)
				continue
			}
			ix = ix.withIn(k, version{seq: seq}, e)
			want[k] = seq
		}
	}

	check := func(name string, ix index, want map[string]uint64) {
		t.Helper()
		keys := make([]string, 0, len(want))
		for k := range want {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, lower := range []string{"", "k0750", "k1499x", "z"} {
			var got []string
			c := ix.seek(lower)
			for n := c.next(); n != nil; n = c.next() {
				if n.v.seq != want[n.key] {
					t.Fatalf("%s: key %s has seq %d, want %d", name, n.key, n.v.seq, want[n.key])
				}
				got = append(got, n.key)
			}
			i, _ := slices.BinarySearch(keys, lower)
			if !slices.Equal(got, keys[i:]) {
				t.Fatalf("%s: from %q got %d keys, want %d in order", name, lower, len(got), len(keys[i:]))
			}
		}
		n := 0
		for c, nd := ix.seek(""), (*node)(nil); ; n++ {
			if nd = c.next(); nd == nil {
				break
			}
		}
		if n != len(want) {
			t.Fatalf("%s: %d keys, want %d", name, n, len(want))
		}
		for k, seq := range want {
			if v, ok := ix.get(k); !ok || v.seq != seq {
				t.Fatalf("%s: get %s = %d, %v; want %d", name, k, v.seq, ok, seq)
			}
		}
	}
	check("old root", old, oldWant)
	check("new root", ix, want)
	for i := range mids {
		check(fmt.Sprintf("root before epoch %d", i+1), mids[i], midWants[i])
	}
}

// TestPrefersSeparateCommits: on a shared stream the engine tells callers
// not to gather independent writes into one commit (each would be an
// atomic batch); as the only writer it wants them gathered (one message).
func TestPrefersSeparateCommits(t *testing.T) {
	if !engine.PrefersSeparateCommits(openEngine(t, map[string]string{"commit": "batch"})) {
		t.Fatal("the jetstream engine with commit=batch does not ask for separate commits")
	}
	if engine.PrefersSeparateCommits(openEngine(t, nil)) {
		t.Fatal("the jetstream engine with commit=wal asks for separate commits")
	}
}
