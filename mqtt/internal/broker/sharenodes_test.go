package broker

import (
	"bytes"
	"fmt"
	"maps"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// A shares record carries the node's members per share, in share order
// whatever the map's, and one cut short or damaged carries none.
func TestSharesRecord(t *testing.T) {
	shares := map[topic.Share]int{{Group: "g", Filter: "a/#"}: 3, {Group: "h", Filter: "b/+/c"}: 1, {Group: "g", Filter: "0"}: 2}
	v, left := appendShares(nil, shares)
	if got := decodeShares(v); left != 0 || !maps.Equal(got, shares) {
		t.Fatalf("decoded %v (left out %d), want %v", got, left, shares)
	}
	for range 5 {
		if again, _ := appendShares(nil, shares); !bytes.Equal(again, v) {
			t.Fatal("the record depends on the map's order")
		}
	}
	if got := decodeShares(v[:len(v)-2]); got != nil {
		t.Fatalf("a cut record: %v, want none", got)
	}
	if got := decodeShares(nil); len(got) != 0 {
		t.Fatalf("an empty record: %v, want none", got)
	}
}

// A node with more shares than its shares record holds publishes those
// that sort first and reports how many it left out.
func TestSharesRecordBounded(t *testing.T) {
	shares := map[topic.Share]int{}
	for i := range 20000 {
		shares[topic.Share{Group: fmt.Sprintf("group-%05d", i), Filter: "devices/+/telemetry/#"}] = 1
	}
	v, left := appendShares(nil, shares)
	got := decodeShares(v)
	if len(v) > maxSharesRecord || left == 0 || len(got)+left != len(shares) {
		t.Fatalf("record of %d bytes with %d shares, %d left out, of %d", len(v), len(got), left, len(shares))
	}
	if _, ok := got[topic.Share{Group: "group-00000", Filter: "devices/+/telemetry/#"}]; !ok {
		t.Fatal("the first share in order is not in the record")
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
