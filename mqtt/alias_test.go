package mqtt_test

import (
	"testing"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestTopicAliasesToClient: a 5.0 client that accepts two topic aliases
// gets the first PUBLISH of a topic with the topic and an alias, the next
// ones with the alias alone, a second topic with the second alias, and a
// third topic, past its maximum, in full. A client that accepts none gets
// no alias.
func TestTopicAliasesToClient(t *testing.T) {
	s := startBroker(t)
	cp := connect5Packet("alias-sub", true, 0)
	cp.Properties.SetTopicAliasMaximum(2)
	sub, _ := connectRaw(t, s.Addr, cp)
	sub.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "al/#", QoS: packet.QoS1}}})
	if _, ok := sub.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	plain, _ := connectRaw(t, s.Addr, connect5Packet("alias-plain", true, 0))
	plain.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "al/#", QoS: packet.QoS1}}})
	if _, ok := plain.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	pub := connect5(t, s.Addr, "alias-pub", true, 0)
	topics := []string{"al/x", "al/x", "al/x", "al/y", "al/y", "al/z", "al/x"}
	for _, tp := range topics {
		pub.pub(tp, 1, false, "m")
	}
	type want struct {
		topic string
		alias uint16
	}
	wants := []want{{"al/x", 1}, {"", 1}, {"", 1}, {"al/y", 2}, {"", 2}, {"al/z", 0}, {"", 1}}
	for i, w := range wants {
		p, ok := sub.Read("packet").(*packet.Publish)
		if !ok {
			t.Fatalf("message %d: not a PUBLISH", i)
		}
		var alias uint16
		if p.Properties.Has(packet.PropTopicAlias) {
			alias = p.Properties.TopicAlias
		}
		if p.Topic != w.topic || alias != w.alias {
			t.Fatalf("message %d (%s): topic %q alias %d, want topic %q alias %d", i, topics[i], p.Topic, alias, w.topic, w.alias)
		}
		sub.Send(&packet.Puback{PacketID: p.PacketID})
	}
	for i, tp := range topics {
		p, ok := plain.Read("packet").(*packet.Publish)
		if !ok || p.Topic != tp || p.Properties.Has(packet.PropTopicAlias) {
			t.Fatalf("client without aliases, message %d: %+v, want topic %q and no alias", i, p, tp)
		}
		plain.Send(&packet.Puback{PacketID: p.PacketID})
	}
}
