package logpos_test

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/table"
)

func drawCursor(t *rapid.T, label string) table.Cursor {
	return table.Cursor{Key: engine.LogKey(rapid.Uint64Range(0, 50).Draw(t, label+".key")), Next: rapid.Uint32Range(0, 3).Draw(t, label+".next")}
}

func drawVec(t *rapid.T, label string, k int) logpos.Vec {
	v := logpos.Start(k)
	for i := range k {
		v.Set(i, drawCursor(t, label))
	}
	return v
}

// TestOnePartitionIsACursor: with one partition, positions and vectors
// write and read the text form of a cursor, so stored forms of a log that
// was never split do not change, and the zero Vec is one partition's.
func TestOnePartitionIsACursor(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := drawCursor(t, "c")
		if got := logpos.At(0, c).String(); got != c.String() {
			t.Fatalf("position %q, cursor %q", got, c.String())
		}
		if got := logpos.One(c).String(); got != c.String() {
			t.Fatalf("vector %q, cursor %q", got, c.String())
		}
		v, err := logpos.ParseVec(c.String())
		if err != nil || v != logpos.One(c) {
			t.Fatalf("%q parsed as %v, %v", c.String(), v, err)
		}
	})
	if (logpos.Vec{}) != logpos.One(table.Cursor{}) || (logpos.Vec{}).Len() != 1 || logpos.Start(1) != (logpos.Vec{}) {
		t.Fatal("the zero Vec is not the start of one partition")
	}
}

// TestPosAndVecRoundTrip: text forms read back to the same value, in any
// partition of a log of up to Max.
func TestPosAndVecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, logpos.Max).Draw(t, "k")
		v := drawVec(t, "v", k)
		back, err := logpos.ParseVec(v.String())
		if err != nil || back != v {
			t.Fatalf("%q parsed as %v, %v", v.String(), back, err)
		}
		p := logpos.At(rapid.IntRange(0, k-1).Draw(t, "part"), drawCursor(t, "p"))
		pb, err := logpos.ParsePos(p.String())
		if err != nil || pb != p {
			t.Fatalf("%q parsed as %v, %v", p.String(), pb, err)
		}
	})
	for _, bad := range []string{"", "x", "0/5", "16/5", "-1/5", "1/", "1/x"} {
		if _, err := logpos.ParsePos(bad); err == nil {
			t.Errorf("position %q parsed", bad)
		}
	}
}

// TestVecOrder: Covers, Advance, Below, Min and Max act per partition,
// each as a cursor's comparison would in that partition alone.
func TestVecOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		k := rapid.IntRange(1, 4).Draw(t, "k")
		v, w := drawVec(t, "v", k), drawVec(t, "w", k)
		part := rapid.IntRange(0, k-1).Draw(t, "part")
		p := logpos.At(part, drawCursor(t, "p"))
		if v.Covers(p) != !v.Of(part).Less(p.C) {
			t.Fatalf("%v covers %v: %v", v, p, v.Covers(p))
		}
		a := v
		a.Advance(p)
		if !a.Covers(p) || a.Below(v) {
			t.Fatalf("%v advanced to %v is %v", v, p, a)
		}
		for i := range k {
			if i != part && a.Of(i) != v.Of(i) {
				t.Fatalf("advancing partition %d moved %d", part, i)
			}
		}
		below := false
		for i := range k {
			below = below || v.Of(i).Less(w.Of(i))
			lo, hi := v.Min(w).Of(i), v.Max(w).Of(i)
			if lo.Less(v.Of(i)) && lo.Less(w.Of(i)) || hi != v.Of(i) && hi != w.Of(i) || hi.Less(lo) {
				t.Fatalf("partition %d: min %v, max %v of %v, %v", i, lo, hi, v.Of(i), w.Of(i))
			}
		}
		if v.Below(w) != below {
			t.Fatalf("%v below %v: %v", v, w, v.Below(w))
		}
		cs := v.Cursors()
		back, err := logpos.FromCursors(cs)
		if err != nil || back != v {
			t.Fatalf("%v as cursors %v, back %v, %v", v, cs, back, err)
		}
		cs[0] = table.Cursor{Key: 999}
		if v.Of(0) == cs[0] {
			t.Fatal("Cursors shares the Vec's memory")
		}
	})
}
