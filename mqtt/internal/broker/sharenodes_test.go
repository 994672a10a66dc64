package broker

import (
	"maps"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// A presence record carries the node's members per share, and a record
// from a node that predates them, or a damaged one, carries none.
func TestPresenceShares(t *testing.T) {
	shares := map[topic.Share]int{{Group: "g", Filter: "a/#"}: 3, {Group: "h", Filter: "b/+/c"}: 1}
	v := appendPresence(nil, 42, 7, shares)
	if got := presenceShares(v); !maps.Equal(got, shares) {
		t.Fatalf("decoded %v, want %v", got, shares)
	}
	if got := presenceShares(v[:16]); got != nil {
		t.Fatalf("a record of start time and counter only: %v, want none", got)
	}
	if got := presenceShares(v[:len(v)-2]); got != nil {
		t.Fatalf("a cut record: %v, want none", got)
	}
	if got := presenceShares(appendPresence(nil, 42, 8, nil)); len(got) != 0 {
		t.Fatalf("a record without members: %v, want none", got)
	}
}

// The pick is a function of the message's log position and the group
// alone, so every node makes it alike, and it spreads positions over the
// members.
func TestSharePickSpreads(t *testing.T) {
	if first, again := sharePick(5, 1, "g"), sharePick(5, 1, "g"); first != again || first == sharePick(5, 2, "g") {
		t.Fatal("the pick is not a function of the position")
	}
	var counts [3]int
	for k := range 3000 {
		counts[sharePick(engine.LogKey(1000+k/4), uint32(k%4), "group")%3]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Fatalf("member %d picked %d times of 3000: %v", i, c, counts)
		}
	}
}
