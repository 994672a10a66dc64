package topic

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		filter, name string
		want         bool
	}{
		{"sport/tennis/player1/#", "sport/tennis/player1", true},
		{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
		{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
		{"sport/#", "sport", true},
		{"#", "sport/tennis", true},
		{"#", "/", true},
		{"sport/tennis/+", "sport/tennis/player1", true},
		{"sport/tennis/+", "sport/tennis/player1/ranking", false},
		{"sport/+", "sport", false},
		{"sport/+", "sport/", true},
		{"+/+", "/finance", true},
		{"/+", "/finance", true},
		{"+", "/finance", false},
		{"+", "finance", true},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
		{"a//b", "a//b", true},
		{"a/+/b", "a//b", true},
		{"#", "$SYS/uptime", false},
		{"+/monitor/Clients", "$SYS/monitor/Clients", false},
		{"$SYS/#", "$SYS/monitor/Clients", true},
		{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
		{"Sport", "sport", false},
	}
	for _, c := range cases {
		if got := Match(c.filter, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.filter, c.name, got, c.want)
		}
	}
}

func TestValidFilter(t *testing.T) {
	valid := []string{"#", "+", "a/#", "a/+/b", "+/+", "/", "a//b", "$share/g/a"}
	invalid := []string{"", "a#", "a/#/b", "a/b#", "a+", "a/+b", "#/a", "a/#/#", "a\x00b"}
	for _, f := range valid {
		if !ValidFilter(f) {
			t.Errorf("ValidFilter(%q) = false", f)
		}
	}
	for _, f := range invalid {
		if ValidFilter(f) {
			t.Errorf("ValidFilter(%q) = true", f)
		}
	}
	if ValidName("a/+") || ValidName("a/#") || ValidName("") || !ValidName("a/b") || !ValidName("/") {
		t.Error("ValidName wrong")
	}
}

func TestParseShared(t *testing.T) {
	s, ok, err := ParseShared("$share/g1/a/+/c")
	if !ok || err != nil || s.Group != "g1" || s.Filter != "a/+/c" {
		t.Fatalf("ParseShared = %+v %v %v", s, ok, err)
	}
	for _, bad := range []string{"$share/", "$share//a", "$share/g", "$share/g+/a", "$share/g/a#", "$share"} {
		if _, ok, err := ParseShared(bad); !ok || err == nil {
			t.Errorf("ParseShared(%q): ok=%v err=%v, want a malformed shared filter", bad, ok, err)
		}
	}
	if _, ok, _ := ParseShared("a/b"); ok {
		t.Error("a/b parsed as shared")
	}
}

func TestIndexMatchesLikeMatch(t *testing.T) {
	filters := []string{"#", "+", "a/#", "a/+", "a/b", "+/b", "a/+/c", "$SYS/#", "+/+/+", "a", "/#", "a//c"}
	names := []string{"a", "a/b", "a/b/c", "b/b", "$SYS/x", "$SYS", "/", "a//c", "x/y/z", ""}
	var ix Index
	for i, f := range filters {
		ix.Add(Subscription{Client: f, Filter: f, QoS: byte(i % 3)})
	}
	for _, n := range names {
		got := map[string]bool{}
		ix.Match(n, func(s Subscription) {
			if got[s.Client] {
				t.Errorf("%q: %q matched twice", n, s.Client)
			}
			got[s.Client] = true
		})
		for _, f := range filters {
			if want := Match(f, n); want != got[f] {
				t.Errorf("index match of %q against %q = %v, Match says %v", n, f, got[f], want)
			}
		}
	}
}

func TestIndexSharedRotatesAndRemoves(t *testing.T) {
	var ix Index
	for _, c := range []string{"c1", "c2", "c3"} {
		ix.Add(Subscription{Client: c, Group: "g", Filter: "s/+"})
	}
	ix.Add(Subscription{Client: "plain", Filter: "s/#"})
	counts := map[string]int{}
	for i := 0; i < 30; i++ {
		n := 0
		ix.Match("s/1", func(s Subscription) {
			counts[s.Client]++
			n++
		})
		if n != 2 {
			t.Fatalf("delivery %d reached %d subscriptions, want 2 (one plain, one of the group)", i, n)
		}
	}
	if counts["plain"] != 30 || counts["c1"] != 10 || counts["c2"] != 10 || counts["c3"] != 10 {
		t.Fatalf("uneven shared rotation: %v", counts)
	}
	if replaced := ix.Add(Subscription{Client: "c1", Group: "g", Filter: "s/+", QoS: 2}); !replaced {
		t.Fatal("re-subscribing did not replace")
	}
	if !ix.Remove("c1", "g", "s/+") || ix.Remove("c1", "g", "s/+") {
		t.Fatal("remove reported wrongly")
	}
	ix.RemoveClient("c2")
	ix.RemoveClient("c3")
	ix.RemoveClient("plain")
	if !ix.root.empty() {
		t.Fatalf("index not pruned: %+v", ix.root)
	}
}

// TestIndexAgreesWithMatchUnderChurn adds and removes subscriptions of
// many clients, so nodes grow past their in-order slices and shrink back,
// and checks after each step that the index matches what Match says of
// every subscription still held.
func TestIndexAgreesWithMatchUnderChurn(t *testing.T) {
	filters := []string{"#", "+", "a/#", "a/+", "a/b", "+/b", "a/+/c", "$SYS/#", "+/+/+", "a", "a//c"}
	for i := range 40 {
		filters = append(filters, fmt.Sprintf("dev/%02d/cmd", i), fmt.Sprintf("dev/%02d/+", i%5))
	}
	names := []string{"a", "a/b", "a/b/c", "b/b", "$SYS/x", "/", "a//c", "dev/07/cmd", "dev/03/x", "dev/41/cmd"}
	rng := rand.New(rand.NewPCG(1, 2))
	var ix Index
	held := map[subKey]Subscription{}
	for step := range 3000 {
		f := filters[rng.IntN(len(filters))]
		client := fmt.Sprintf("c%d", rng.IntN(30))
		k := subKey{client + "\x00" + f, ""}
		if _, ok := held[k]; ok && rng.IntN(2) == 0 {
			if !ix.Remove(k.client, "", f) {
				t.Fatalf("step %d: Remove(%q, %q) found nothing", step, client, f)
			}
			delete(held, k)
		} else {
			s := Subscription{Client: k.client, Filter: f, QoS: byte(step % 3)}
			if replaced := ix.Add(s); replaced != (held[k] != Subscription{}) {
				t.Fatalf("step %d: Add(%q, %q) replaced=%v", step, client, f, replaced)
			}
			held[k] = s
		}
		if step%50 != 0 {
			continue
		}
		for _, n := range names {
			got := map[string]byte{}
			ix.Match(n, func(s Subscription) { got[s.Client] = s.QoS })
			want := map[string]byte{}
			for _, s := range held {
				if Match(s.Filter, n) {
					want[s.Client] = s.QoS
				}
			}
			if !maps.Equal(got, want) {
				t.Fatalf("step %d: %q matched %v, want %v", step, n, got, want)
			}
		}
	}
	for k, s := range held {
		if !ix.Remove(k.client, "", s.Filter) {
			t.Fatalf("Remove(%q) found nothing", k.client)
		}
	}
	if !ix.root.empty() {
		t.Fatalf("index not pruned: %+v", ix.root)
	}
}

// Shares counts each shared subscription's members as they are added,
// replaced, removed one by one and removed with their client, and
// forgets a share once it has none.
func TestIndexCountsShareMembers(t *testing.T) {
	var ix Index
	ix.Add(Subscription{Client: "a", Filter: "s/#", Group: "g"})
	ix.Add(Subscription{Client: "b", Filter: "s/#", Group: "g", QoS: 1})
	ix.Add(Subscription{Client: "b", Filter: "s/#", Group: "g", QoS: 2}) // replaces
	ix.Add(Subscription{Client: "b", Filter: "s/+", Group: "g"})
	ix.Add(Subscription{Client: "c", Filter: "s/#", Group: "h"})
	ix.Add(Subscription{Client: "c", Filter: "s/#"}) // plain
	want := map[Share]int{{"g", "s/#"}: 2, {"g", "s/+"}: 1, {"h", "s/#"}: 1}
	if got := ix.Shares(); !maps.Equal(got, want) {
		t.Fatalf("Shares() = %v, want %v", got, want)
	}
	ix.Remove("a", "g", "s/#")
	ix.Remove("a", "g", "s/#") // gone already
	ix.RemoveClient("b")
	ix.Remove("c", "", "s/#")
	want = map[Share]int{{"h", "s/#"}: 1}
	if got := ix.Shares(); !maps.Equal(got, want) {
		t.Fatalf("after removals Shares() = %v, want %v", got, want)
	}
	ix.Match("s/x", func(Subscription) {}) // starts the share's rotation
	ix.RemoveClient("c")
	if got := ix.Shares(); len(got) != 0 {
		t.Fatalf("with no member left Shares() = %v, want none", got)
	}
	if len(ix.rr) != 0 {
		t.Fatalf("rotations of shares gone are kept: %v", ix.rr)
	}
}
