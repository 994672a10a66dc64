package packet

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// samples returns packets of every type: a minimal and a full one each,
// the full ones carrying every property their type allows.
func samples() []Packet {
	willFull := &Will{Topic: "clients/c1/status", Payload: []byte("gone"), QoS: QoS2, Retain: true,
		Properties: allProps(ctxWill)}
	return []Packet{
		&Connect{CleanStart: true, ClientID: ""},
		&Connect{CleanStart: false, KeepAlive: 60, ClientID: "c1", Will: &Will{Topic: "t", QoS: QoS1}},
		&Connect{CleanStart: true, KeepAlive: 65535, ClientID: "client-ü", Properties: allProps(ctxConnect),
			Will: willFull, HasUsername: true, Username: "", HasPassword: true, Password: []byte{}},
		&Connect{ClientID: "c2", HasUsername: true, Username: "user", HasPassword: true, Password: []byte{0, 1, 2}},
		&Connack{},
		&Connack{SessionPresent: true, Properties: allProps(ctxConnack)},
		&Connack{ReasonCode: NotAuthorized},
		&Connack{ReasonCode: UnsupportedProtocolVersion},
		&Publish{Topic: "a/b", Payload: []byte("hello")},
		&Publish{Topic: "a", QoS: QoS1, PacketID: 1, Retain: true},
		&Publish{Topic: "sensors/7/temp", QoS: QoS2, PacketID: 65535, Dup: true, Retain: true,
			Properties: allProps(ctxPublish), Payload: []byte(`{"t":21.5}`)},
		&Publish{Topic: "$SYS/x", QoS: QoS1, PacketID: 9, Payload: bytes.Repeat([]byte{0xAB}, 70000)},
		&Puback{PacketID: 1},
		&Puback{PacketID: 2, ReasonCode: NoMatchingSubscribers},
		&Puback{PacketID: 3, ReasonCode: QuotaExceeded, Properties: allProps(ctxAck)},
		&Pubrec{PacketID: 4},
		&Pubrec{PacketID: 5, ReasonCode: PayloadFormatInvalid, Properties: allProps(ctxAck)},
		&Pubrel{PacketID: 6},
		&Pubrel{PacketID: 7, ReasonCode: PacketIdentifierNotFound},
		&Pubrel{PacketID: 8, Properties: allProps(ctxAck)},
		&Pubcomp{PacketID: 9},
		&Pubcomp{PacketID: 10, ReasonCode: PacketIdentifierNotFound, Properties: allProps(ctxAck)},
		&Subscribe{PacketID: 11, Subscriptions: []Subscription{{Filter: "a/+/c", QoS: QoS1}}},
		&Subscribe{PacketID: 12, Properties: allProps(ctxSubscribe), Subscriptions: []Subscription{
			{Filter: "#", QoS: QoS2, NoLocal: true, RetainAsPublished: true, RetainHandling: DoNotSendRetained},
			{Filter: "$share/g1/a/#", QoS: QoS0, RetainHandling: SendRetainedIfNew},
			{Filter: "+", QoS: QoS1},
			{Filter: "/", QoS: QoS0},
		}},
		&Suback{PacketID: 13, ReasonCodes: []ReasonCode{GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError}},
		&Suback{PacketID: 14, Properties: allProps(ctxSuback), ReasonCodes: []ReasonCode{GrantedQoS1, TopicFilterInvalid,
			WildcardSubscriptionsNotSupported}},
		&Unsubscribe{PacketID: 15, Filters: []string{"a/b"}},
		&Unsubscribe{PacketID: 16, Properties: allProps(ctxUnsubscribe), Filters: []string{"a/#", "$share/g/+", "x"}},
		&Unsuback{PacketID: 17, ReasonCodes: []ReasonCode{Success}},
		&Unsuback{PacketID: 18, Properties: allProps(ctxUnsuback), ReasonCodes: []ReasonCode{NoSubscriptionExisted, NotAuthorized}},
		&Pingreq{},
		&Pingresp{},
		&Disconnect{},
		&Disconnect{ReasonCode: DisconnectWithWillMessage},
		&Disconnect{ReasonCode: ServerMoved, Properties: allProps(ctxDisconnect)},
		&Auth{},
		&Auth{ReasonCode: ContinueAuthentication, Properties: allProps(ctxAuth)},
		&Auth{ReasonCode: ReAuthenticate},
	}
}

// encodable reports whether p can be encoded for v at all.
func encodable(p Packet, v Version) bool {
	if v != V311 {
		return true
	}
	switch p := p.(type) {
	case *Auth:
		return false
	case *Connack:
		_, ok := ConnackReturnCode311(p.ReasonCode)
		return ok
	}
	return true
}

func TestRoundTripSamples(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		for i, p := range samples() {
			if !encodable(p, v) {
				if _, err := p.Append(nil, v); err == nil {
					t.Errorf("%v #%d: encoding for %v should fail", p.Type(), i, v)
				}
				continue
			}
			b := encode(t, p, v)
			got := decodeOne(t, b, v)
			want := downgrade(p, v)
			if !reflect.DeepEqual(canon(got), want) {
				t.Errorf("%v #%d %v:\n got %#v\nwant %#v", p.Type(), i, v, canon(got), want)
			}
			// Re-encoding the decoded packet gives the same bytes.
			if b2 := encode(t, got, v); !bytes.Equal(b, b2) {
				t.Errorf("%v #%d %v: re-encoding differs\n% x\n% x", p.Type(), i, v, b, b2)
			}
		}
	}
}

// TestEveryPropertyCovered checks that the full samples, between them,
// carry every property identifier, so the round trip covers each.
func TestEveryPropertyCovered(t *testing.T) {
	seen := map[PropertyID]bool{}
	for _, p := range samples() {
		for _, pp := range propertiesOf(p) {
			for _, id := range propertyIDs() {
				if pp.Has(id) {
					seen[id] = true
				}
			}
		}
	}
	for _, id := range propertyIDs() {
		if !seen[id] {
			t.Errorf("no sample carries %v", id)
		}
	}
}

// TestKnownEncodings pins byte-exact encodings taken from the specifications'
// layouts, so a symmetric bug in encoder and decoder cannot hide.
func TestKnownEncodings(t *testing.T) {
	cases := []struct {
		name string
		p    Packet
		v    Version
		want []byte
	}{
		{"connect 3.1.1", &Connect{CleanStart: true, KeepAlive: 10, ClientID: "a"}, V311,
			[]byte{0x10, 13, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 10, 0, 1, 'a'}},
		{"connect 5.0", &Connect{CleanStart: true, KeepAlive: 10, ClientID: "a"}, V5,
			[]byte{0x10, 14, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 10, 0, 0, 1, 'a'}},
		{"connack 3.1.1 refused", &Connack{ReasonCode: UnsupportedProtocolVersion}, V311, []byte{0x20, 2, 0, 1}},
		{"connack 5.0 refused", &Connack{ReasonCode: UnsupportedProtocolVersion}, V5, []byte{0x20, 3, 0, 0x84, 0}},
		{"publish qos0", &Publish{Topic: "a/b", Payload: []byte("x")}, V311,
			[]byte{0x30, 6, 0, 3, 'a', '/', 'b', 'x'}},
		{"publish qos1 dup retain 5.0", &Publish{Topic: "t", QoS: QoS1, PacketID: 0x0102, Dup: true, Retain: true}, V5,
			[]byte{0x3B, 6, 0, 1, 't', 1, 2, 0}},
		{"puback success 5.0", &Puback{PacketID: 7}, V5, []byte{0x40, 2, 0, 7}},
		{"puback code 5.0", &Puback{PacketID: 7, ReasonCode: NoMatchingSubscribers}, V5, []byte{0x40, 3, 0, 7, 0x10}},
		{"pubrel 3.1.1", &Pubrel{PacketID: 7}, V311, []byte{0x62, 2, 0, 7}},
		{"subscribe 5.0", &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", QoS: 1, NoLocal: true,
			RetainAsPublished: true, RetainHandling: 2}}}, V5, []byte{0x82, 7, 0, 1, 0, 0, 1, 'a', 0x2D}},
		{"suback 3.1.1 failure", &Suback{PacketID: 1, ReasonCodes: []ReasonCode{NotAuthorized}}, V311,
			[]byte{0x90, 3, 0, 1, 0x80}},
		{"unsuback 3.1.1", &Unsuback{PacketID: 1, ReasonCodes: []ReasonCode{Success}}, V311, []byte{0xB0, 2, 0, 1}},
		{"disconnect 3.1.1", &Disconnect{ReasonCode: ServerBusy}, V311, []byte{0xE0, 0}},
		{"disconnect 5.0", &Disconnect{}, V5, []byte{0xE0, 1, 0}},
		{"auth success 5.0", &Auth{}, V5, []byte{0xF0, 0}},
		{"user property", &Puback{PacketID: 1, Properties: Properties{User: []UserProperty{{"a", "b"}}}}, V5,
			[]byte{0x40, 11, 0, 1, 0, 7, 0x26, 0, 1, 'a', 0, 1, 'b'}},
		{"subscription id vbi", &Publish{Topic: "t", Properties: Properties{SubscriptionIDs: []uint32{128}}}, V5,
			[]byte{0x30, 7, 0, 1, 't', 3, 0x0B, 0x80, 0x01}},
	}
	for _, c := range cases {
		if got := encode(t, c.p, c.v); !bytes.Equal(got, c.want) {
			t.Errorf("%s:\n got % x\nwant % x", c.name, got, c.want)
		}
	}
}

// TestRemainingLengthBoundaries round-trips payloads whose remaining
// lengths sit on each boundary of the variable byte integer.
func TestRemainingLengthBoundaries(t *testing.T) {
	for _, rl := range []int{127, 128, 16383, 16384, 2097151, 2097152} {
		// topic "t" (3 bytes) + property length (1 byte under 5.0)
		p := &Publish{Topic: "t", Payload: make([]byte, rl-4)}
		b := encode(t, p, V5)
		if want := 1 + vbiLen(rl) + rl; len(b) != want {
			t.Fatalf("rl %d: %d bytes, want %d", rl, len(b), want)
		}
		got := decodeOne(t, b, V5).(*Publish)
		if len(got.Payload) != rl-4 {
			t.Fatalf("rl %d: payload %d", rl, len(got.Payload))
		}
	}
	p := &Publish{Topic: "t", Payload: make([]byte, MaxRemainingLength)}
	if _, err := p.Size(V311); err == nil {
		t.Fatal("remaining length over the maximum was accepted")
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	long := strings.Repeat("x", 65536)
	cases := []struct {
		name string
		p    Packet
		v    Version
	}{
		{"qos 3", &Publish{Topic: "t", QoS: 3, PacketID: 1}, V5},
		{"dup qos0", &Publish{Topic: "t", Dup: true}, V5},
		{"publish id 0", &Publish{Topic: "t", QoS: 1}, V5},
		{"empty topic 3.1.1", &Publish{}, V311},
		{"empty topic no alias", &Publish{}, V5},
		{"long topic", &Publish{Topic: long}, V5},
		{"property not allowed", &Publish{Topic: "t", Properties: Properties{present: bit(PropReasonString)}}, V5},
		{"topic alias 0", &Publish{Topic: "t", Properties: Properties{present: bit(PropTopicAlias)}}, V5},
		{"payload format 2", &Publish{Topic: "t", Properties: Properties{present: bit(PropPayloadFormat), PayloadFormat: 2}}, V5},
		{"long user property", &Puback{PacketID: 1, Properties: Properties{User: []UserProperty{{long, ""}}}}, V5},
		{"ack id 0", &Puback{}, V5},
		{"ack code", &Pubrel{PacketID: 1, ReasonCode: QuotaExceeded}, V5},
		{"connack code 3.1.1", &Connack{ReasonCode: Banned}, V311},
		{"connack session present on failure", &Connack{SessionPresent: true, ReasonCode: Banned}, V5},
		{"connect level", &Connect{ClientID: "c"}, 3},
		{"connect password 3.1.1", &Connect{ClientID: "c", HasPassword: true}, V311},
		{"connect empty id 3.1.1", &Connect{}, V311},
		{"will topic", &Connect{CleanStart: true, Will: &Will{Topic: "a/#"}}, V5},
		{"auth 3.1.1", &Auth{}, V311},
		{"subscribe empty", &Subscribe{PacketID: 1}, V5},
		{"subscribe two ids", &Subscribe{PacketID: 1, Properties: Properties{SubscriptionIDs: []uint32{1, 2}},
			Subscriptions: []Subscription{{Filter: "a"}}}, V5},
		{"subscription id 0", &Publish{Topic: "t", Properties: Properties{SubscriptionIDs: []uint32{0}}}, V5},
		{"retain handling 3", &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "a", RetainHandling: 3}}}, V5},
		{"suback empty", &Suback{PacketID: 1}, V5},
		{"suback code 3.1.1", &Suback{PacketID: 1, ReasonCodes: []ReasonCode{0x10}}, V311},
		{"unsubscribe empty", &Unsubscribe{PacketID: 1}, V5},
		{"unsuback code", &Unsuback{PacketID: 1, ReasonCodes: []ReasonCode{GrantedQoS1}}, V5},
		{"disconnect code", &Disconnect{ReasonCode: Success + 1}, V5},
		{"auth data without method", &Auth{ReasonCode: ContinueAuthentication,
			Properties: Properties{present: bit(PropAuthData)}}, V5},
	}
	for _, c := range cases {
		dst := []byte("keep")
		out, err := c.p.Append(dst, c.v)
		wantCodecError(t, err, ErrInvalid, ImplementationSpecificError)
		if string(out) != "keep" {
			t.Errorf("%s: Append changed dst on error", c.name)
		}
		if _, err := c.p.Size(c.v); err == nil {
			t.Errorf("%s: Size accepted what Append refused", c.name)
		}
	}
}

func TestReasonCodeStrings(t *testing.T) {
	for c, name := range reasonNames {
		if c.String() != name || name == "" {
			t.Errorf("%#x: %q", byte(c), c.String())
		}
	}
	if got := ReasonCode(0x03).String(); got != "reason code 0x3" {
		t.Errorf("undefined code: %q", got)
	}
	// Every code named as a constant has a name.
	for _, c := range []ReasonCode{Success, GrantedQoS1, GrantedQoS2, DisconnectWithWillMessage,
		NoMatchingSubscribers, NoSubscriptionExisted, ContinueAuthentication, ReAuthenticate,
		WildcardSubscriptionsNotSupported, MaximumConnectTime, ServerMoved} {
		if _, ok := reasonNames[c]; !ok {
			t.Errorf("%#x has no name", byte(c))
		}
	}
	if len(reasonNames) != 43 {
		t.Errorf("%d reason codes named; the 5.0 spec defines 43 distinct values", len(reasonNames))
	}
	if TypePublish.String() != "PUBLISH" || PropTopicAlias.String() != "topic alias" || V5.String() != "5.0" {
		t.Error("stringers")
	}
}

// TestAppendBurstGrowsGeometrically: packets appended one after another to
// one buffer (a client's burst) reallocate it a logarithmic number of
// times, not once per packet; a burst of 1,000 4 KB PUBLISHes then costs
// a few copies of its 4 MB, not 2 GB of them. Subscribe, Connect and the
// other packets sized ahead grow the same way.
func TestAppendBurstGrowsGeometrically(t *testing.T) {
	const n = 1000
	pub := &Publish{Topic: "burst/x", QoS: QoS2, PacketID: 1, Payload: make([]byte, 4000)}
	sub := &Subscribe{PacketID: 1, Subscriptions: []Subscription{{Filter: "burst/#", QoS: QoS1}}}
	for _, p := range []Packet{pub, sub} {
		allocs := testing.AllocsPerRun(3, func() {
			var b []byte
			for range n {
				var err error
				if b, err = p.Append(b, V5); err != nil {
					t.Fatal(err)
				}
			}
		})
		if allocs > 64 {
			t.Errorf("%v: appending %d packets to one buffer allocated %v times, want a logarithmic number", p.Type(), n, allocs)
		}
	}
}
