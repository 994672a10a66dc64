package topicalias_test

import (
	"testing"

	"github.com/tidemark-io/tidemark/mqtt/internal/topicalias"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestOut checks the table's invariant: a topic keeps its topic name next
// to its alias until Written reports a PUBLISH carrying both, at most max
// aliases are handed out, and max 0 (a client that takes none) gets none.
func TestOut(t *testing.T) {
	var a topicalias.Out
	send := func(topic string, max uint16) *packet.Publish {
		p := &packet.Publish{Topic: topic}
		a.Apply(p, max)
		return p
	}
	if p := send("x", 0); p.Properties.Has(packet.PropTopicAlias) || p.Topic != "x" {
		t.Fatalf("max 0: got topic %q, alias set %v", p.Topic, p.Properties.Has(packet.PropTopicAlias))
	}
	first := send("x", 2)
	if first.Topic != "x" || first.Properties.TopicAlias != 1 {
		t.Fatalf("first PUBLISH of x: topic %q alias %d, want x and 1", first.Topic, first.Properties.TopicAlias)
	}
	if p := send("x", 2); p.Topic != "x" {
		t.Fatalf("x before Written lost its topic (alias %d)", p.Properties.TopicAlias)
	}
	a.Written("x")
	if p := send("x", 2); p.Topic != "" || p.Properties.TopicAlias != 1 {
		t.Fatalf("x after Written: topic %q alias %d, want the alias 1 alone", p.Topic, p.Properties.TopicAlias)
	}
	if p := send("y", 2); p.Topic != "y" || p.Properties.TopicAlias != 2 {
		t.Fatalf("y: topic %q alias %d, want y and 2", p.Topic, p.Properties.TopicAlias)
	}
	a.Written("z") // never given an alias: nothing to learn
	if p := send("z", 2); p.Topic != "z" || p.Properties.Has(packet.PropTopicAlias) {
		t.Fatalf("z past the maximum: topic %q alias %d, want the topic alone", p.Topic, p.Properties.TopicAlias)
	}
}
