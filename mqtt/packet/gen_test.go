package packet

import (
	"strings"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

// Generators of valid packets, shared by the property-based round trip and
// the differential tests against the paho codecs.

// genCfg says what to generate.
type genCfg struct {
	v Version
	// paho keeps to what paho.golang's packets represent faithfully: it
	// treats an empty string or binary property as absent and holds one
	// subscription identifier.
	paho bool
	// pahoWill keeps Will properties to those paho.golang writes (it packs
	// them with the CONNECT set): Will Delay Interval and User Properties.
	pahoWill bool
}

func codesOf(set codeSet) []ReasonCode {
	var out []ReasonCode
	for c := 0; c < 256; c++ {
		if set.has(ReasonCode(c)) {
			out = append(out, ReasonCode(c))
		}
	}
	return out
}

// genRune draws mostly topic-ish ASCII, sometimes any valid rune but NUL.
var genRune = rapid.OneOf(
	rapid.RuneFrom([]rune("abcxyz019-_.$ /")),
	rapid.RuneFrom([]rune{0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfeff, 0xfffd, 0xffff, 0x10000, 0x10ffff},
		rangeOf(0x01, 0x7f), rangeOf(0xa0, 0x2ff), rangeOf(0x4e00, 0x4eff), rangeOf(0x1f600, 0x1f64f)),
)

func rangeOf(lo, hi rune) *unicode.RangeTable {
	return &unicode.RangeTable{R32: []unicode.Range32{{Lo: uint32(lo), Hi: uint32(hi), Stride: 1}}}
}

// genStr draws a valid MQTT string of up to max runes.
func genStr(min, max int) *rapid.Generator[string] {
	return rapid.StringOfN(genRune, min, max, -1)
}

func genBytes(min, max int) *rapid.Generator[[]byte] { return rapid.SliceOfN(rapid.Byte(), min, max) }

// genLevel draws one topic level without wildcards or '/'.
var genLevel = rapid.StringOfN(rapid.OneOf(rapid.RuneFrom([]rune("abc019-_$")),
	rapid.RuneFrom([]rune("ü☃𝄞"))), 0, 6, -1)

var genTopic = rapid.Custom(func(t *rapid.T) string {
	levels := rapid.SliceOfN(genLevel, 1, 4).Draw(t, "levels")
	topic := strings.Join(levels, "/")
	if topic == "" {
		return "x"
	}
	return topic
})

var genFilter = rapid.Custom(func(t *rapid.T) string {
	n := rapid.IntRange(1, 4).Draw(t, "levels")
	levels := make([]string, n)
	for i := range levels {
		levels[i] = rapid.OneOf(genLevel, rapid.Just("+")).Draw(t, "level")
	}
	if rapid.Bool().Draw(t, "multi") {
		levels = append(levels, "#")
	}
	f := strings.Join(levels, "/")
	if f == "" {
		f = "x"
	}
	if rapid.IntRange(0, 4).Draw(t, "shared") == 0 {
		f = "$share/" + rapid.StringOfN(rapid.RuneFrom([]rune("gh12")), 1, 4, -1).Draw(t, "group") + "/" + f
	}
	return f
})

func genProps(t *rapid.T, ctx propCtx, cfg genCfg) Properties {
	var p Properties
	m := allowed[ctx]
	if ctx == ctxWill && cfg.pahoWill {
		m &= bits(PropWillDelay, PropUserProperty)
	}
	minStr := 0
	if cfg.paho {
		minStr = 1
	}
	want := func(id PropertyID) bool {
		return m&bit(id) != 0 && rapid.Bool().Draw(t, id.String())
	}
	u8 := func(name string) byte { return rapid.ByteRange(0, 1).Draw(t, name) }
	if want(PropPayloadFormat) {
		p.SetPayloadFormat(u8("payload format"))
	}
	if want(PropMessageExpiry) {
		p.SetMessageExpiry(rapid.Uint32().Draw(t, "expiry"))
	}
	if want(PropContentType) {
		p.SetContentType(genStr(minStr, 8).Draw(t, "content type"))
	}
	if want(PropResponseTopic) {
		p.SetResponseTopic(genTopic.Draw(t, "response topic"))
	}
	if want(PropCorrelationData) {
		p.SetCorrelationData(genBytes(minStr, 8).Draw(t, "correlation"))
	}
	if m&bit(PropSubscriptionID) != 0 {
		max := 3
		if cfg.paho || ctx == ctxSubscribe {
			max = 1
		}
		p.SubscriptionIDs = rapid.SliceOfN(rapid.Uint32Range(1, MaxSubscriptionID), 0, max).Draw(t, "sub ids")
	}
	if want(PropSessionExpiry) {
		p.SetSessionExpiry(rapid.Uint32().Draw(t, "session expiry"))
	}
	if want(PropAssignedClientID) {
		p.SetAssignedClientID(genStr(minStr, 8).Draw(t, "assigned id"))
	}
	if want(PropServerKeepAlive) {
		p.SetServerKeepAlive(rapid.Uint16().Draw(t, "server keep alive"))
	}
	if want(PropAuthMethod) {
		p.SetAuthMethod(genStr(minStr, 8).Draw(t, "auth method"))
	}
	if want(PropAuthData) {
		if !p.Has(PropAuthMethod) {
			p.SetAuthMethod("m")
		}
		p.SetAuthData(genBytes(minStr, 8).Draw(t, "auth data"))
	}
	if want(PropRequestProblemInfo) {
		p.SetRequestProblemInfo(u8("problem info"))
	}
	if want(PropWillDelay) {
		p.SetWillDelay(rapid.Uint32().Draw(t, "will delay"))
	}
	if want(PropRequestResponseInfo) {
		p.SetRequestResponseInfo(u8("response info request"))
	}
	if want(PropResponseInfo) {
		p.SetResponseInfo(genStr(minStr, 8).Draw(t, "response info"))
	}
	if want(PropServerReference) {
		p.SetServerReference(genStr(minStr, 8).Draw(t, "server reference"))
	}
	if want(PropReasonString) {
		p.SetReasonString(genStr(minStr, 8).Draw(t, "reason string"))
	}
	if want(PropReceiveMaximum) {
		p.SetReceiveMaximum(rapid.Uint16Range(1, 65535).Draw(t, "receive maximum"))
	}
	if want(PropTopicAliasMaximum) {
		p.SetTopicAliasMaximum(rapid.Uint16().Draw(t, "topic alias maximum"))
	}
	if want(PropTopicAlias) {
		p.SetTopicAlias(rapid.Uint16Range(1, 65535).Draw(t, "topic alias"))
	}
	if want(PropMaximumQoS) {
		p.SetMaximumQoS(u8("maximum qos"))
	}
	if want(PropRetainAvailable) {
		p.SetRetainAvailable(u8("retain available"))
	}
	if want(PropMaximumPacketSize) {
		p.SetMaximumPacketSize(rapid.Uint32Range(1, 1<<32-1).Draw(t, "maximum packet size"))
	}
	if want(PropWildcardSubAvailable) {
		p.SetWildcardSubAvailable(u8("wildcard"))
	}
	if want(PropSubIDAvailable) {
		p.SetSubIDAvailable(u8("sub ids available"))
	}
	if want(PropSharedSubAvailable) {
		p.SetSharedSubAvailable(u8("shared"))
	}
	for _, kv := range rapid.SliceOfN(rapid.SliceOfN(genStr(0, 6), 2, 2), 0, 3).Draw(t, "user") {
		p.AddUser(kv[0], kv[1])
	}
	return p
}

// props draws properties under 5.0 and none under 3.1.1.
func props(t *rapid.T, ctx propCtx, cfg genCfg) Properties {
	if cfg.v != V5 {
		return Properties{}
	}
	return genProps(t, ctx, cfg)
}

func genPayload(t *rapid.T, p *Properties) []byte {
	if p.PayloadFormat == 1 {
		return []byte(genStr(0, 20).Draw(t, "utf-8 payload"))
	}
	return genBytes(0, 40).Draw(t, "payload")
}

func genPacket(cfg genCfg) *rapid.Generator[Packet] {
	v := cfg.v
	qos := rapid.Custom(func(t *rapid.T) QoS { return QoS(rapid.ByteRange(0, 2).Draw(t, "qos")) })
	id := rapid.Uint16Range(1, 65535)
	connect := rapid.Custom(func(t *rapid.T) Packet {
		c := &Connect{Version: v, CleanStart: rapid.Bool().Draw(t, "clean"), KeepAlive: rapid.Uint16().Draw(t, "keep alive")}
		c.Properties = props(t, ctxConnect, cfg)
		c.ClientID = genStr(0, 10).Draw(t, "client id")
		if v == V311 && c.ClientID == "" {
			c.CleanStart = true
		}
		if rapid.Bool().Draw(t, "will") {
			w := &Will{Topic: genTopic.Draw(t, "will topic"), QoS: qos.Draw(t, "will qos"), Retain: rapid.Bool().Draw(t, "will retain")}
			w.Properties = props(t, ctxWill, cfg)
			w.Payload = genPayload(t, &w.Properties)
			c.Will = w
		}
		c.HasUsername = rapid.Bool().Draw(t, "has user")
		if c.HasUsername {
			c.Username = genStr(0, 10).Draw(t, "user")
		}
		c.HasPassword = rapid.Bool().Draw(t, "has password") && (c.HasUsername || v == V5)
		if c.HasPassword {
			c.Password = genBytes(0, 10).Draw(t, "password")
		}
		return c
	})
	connackCodeList := codesOf(connackCodes)
	if v == V311 {
		connackCodeList = connackV311[:]
	}
	connack := rapid.Custom(func(t *rapid.T) Packet {
		c := &Connack{ReasonCode: rapid.SampledFrom(connackCodeList).Draw(t, "code")}
		c.SessionPresent = c.ReasonCode == Success && rapid.Bool().Draw(t, "session present")
		c.Properties = props(t, ctxConnack, cfg)
		return c
	})
	publish := rapid.Custom(func(t *rapid.T) Packet {
		p := &Publish{QoS: qos.Draw(t, "qos"), Retain: rapid.Bool().Draw(t, "retain")}
		if p.QoS > 0 {
			p.PacketID = id.Draw(t, "id")
			p.Dup = rapid.Bool().Draw(t, "dup")
		}
		p.Properties = props(t, ctxPublish, cfg)
		p.Topic = genTopic.Draw(t, "topic")
		if p.Properties.Has(PropTopicAlias) && rapid.Bool().Draw(t, "alias only") {
			p.Topic = ""
		}
		p.Payload = genPayload(t, &p.Properties)
		return p
	})
	ack := func(kind Type, set codeSet) *rapid.Generator[Packet] {
		codes := codesOf(set)
		return rapid.Custom(func(t *rapid.T) Packet {
			pid := id.Draw(t, "id")
			var rc ReasonCode
			if v == V5 {
				rc = rapid.SampledFrom(codes).Draw(t, "code")
			}
			pr := props(t, ctxAck, cfg)
			switch kind {
			case TypePuback:
				return &Puback{PacketID: pid, ReasonCode: rc, Properties: pr}
			case TypePubrec:
				return &Pubrec{PacketID: pid, ReasonCode: rc, Properties: pr}
			case TypePubrel:
				return &Pubrel{PacketID: pid, ReasonCode: rc, Properties: pr}
			}
			return &Pubcomp{PacketID: pid, ReasonCode: rc, Properties: pr}
		})
	}
	subscribe := rapid.Custom(func(t *rapid.T) Packet {
		s := &Subscribe{PacketID: id.Draw(t, "id"), Properties: props(t, ctxSubscribe, cfg)}
		for range rapid.IntRange(1, 4).Draw(t, "n") {
			sub := Subscription{Filter: genFilter.Draw(t, "filter"), QoS: qos.Draw(t, "qos")}
			if v == V5 {
				sub.NoLocal = rapid.Bool().Draw(t, "no local") && !isShared(sub.Filter)
				sub.RetainAsPublished = rapid.Bool().Draw(t, "rap")
				sub.RetainHandling = RetainHandling(rapid.ByteRange(0, 2).Draw(t, "rh"))
			}
			s.Subscriptions = append(s.Subscriptions, sub)
		}
		return s
	})
	subackSet := subackCodes
	if v == V311 {
		subackSet = subackCodes311
	}
	subackCodeList := codesOf(subackSet)
	suback := rapid.Custom(func(t *rapid.T) Packet {
		return &Suback{PacketID: id.Draw(t, "id"), Properties: props(t, ctxSuback, cfg),
			ReasonCodes: rapid.SliceOfN(rapid.SampledFrom(subackCodeList), 1, 4).Draw(t, "codes")}
	})
	unsubscribe := rapid.Custom(func(t *rapid.T) Packet {
		return &Unsubscribe{PacketID: id.Draw(t, "id"), Properties: props(t, ctxUnsubscribe, cfg),
			Filters: rapid.SliceOfN(genFilter, 1, 4).Draw(t, "filters")}
	})
	unsubackCodeList := codesOf(unsubackCodes)
	unsuback := rapid.Custom(func(t *rapid.T) Packet {
		u := &Unsuback{PacketID: id.Draw(t, "id"), Properties: props(t, ctxUnsuback, cfg)}
		if v == V5 {
			u.ReasonCodes = rapid.SliceOfN(rapid.SampledFrom(unsubackCodeList), 1, 4).Draw(t, "codes")
		}
		return u
	})
	disconnectCodeList := codesOf(disconnectCodes)
	disconnect := rapid.Custom(func(t *rapid.T) Packet {
		d := &Disconnect{ReasonCode: rapid.SampledFrom(disconnectCodeList).Draw(t, "code")}
		if v == V5 {
			d.Properties = props(t, ctxDisconnect, cfg)
		} else {
			d.ReasonCode = NormalDisconnection
		}
		return d
	})
	authCodeList := codesOf(authCodes)
	auth := rapid.Custom(func(t *rapid.T) Packet {
		return &Auth{ReasonCode: rapid.SampledFrom(authCodeList).Draw(t, "code"), Properties: props(t, ctxAuth, cfg)}
	})
	gens := []*rapid.Generator[Packet]{connect, connack, publish,
		ack(TypePuback, pubackCodes), ack(TypePubrec, pubackCodes), ack(TypePubrel, pubrelCodes),
		ack(TypePubcomp, pubrelCodes), subscribe, suback, unsubscribe, unsuback,
		rapid.Just[Packet](&Pingreq{}), rapid.Just[Packet](&Pingresp{}), disconnect}
	if v == V5 {
		gens = append(gens, auth)
	}
	return rapid.OneOf(gens...)
}

// TestRoundTripGenerated encodes generated packets of both levels, decodes
// them through every entry point and checks the result is the packet, and
// that re-encoding gives the same bytes. It also checks that the generator
// reached every packet type and every property.
func TestRoundTripGenerated(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		t.Run(v.String(), func(t *testing.T) {
			types := map[Type]bool{}
			seen := map[PropertyID]bool{}
			checkMany(t, func(t *rapid.T) {
				p := genPacket(genCfg{v: v}).Draw(t, "packet")
				b := encode(t, p, v)
				got := decodeOne(t, b, v)
				if !equalPackets(got, downgrade(p, v)) {
					t.Fatalf("round trip:\n got %#v\nwant %#v", canon(got), downgrade(p, v))
				}
				if b2 := encode(t, got, v); string(b2) != string(b) {
					t.Fatalf("re-encoding differs")
				}
				types[p.Type()] = true
				for _, pp := range propertiesOf(p) {
					for _, id := range propertyIDs() {
						if pp.Has(id) {
							seen[id] = true
						}
					}
				}
			})
			if testing.Short() {
				return // too few cases to be sure of reaching everything
			}
			wantTypes := 14
			if v == V5 {
				wantTypes = 15
				if len(seen) != len(propertyIDs()) {
					t.Errorf("generated %d of %d properties", len(seen), len(propertyIDs()))
				}
			}
			if len(types) != wantTypes {
				t.Errorf("generated %d packet types", len(types))
			}
		})
	}
}

// propertiesOf returns every property set a packet carries.
func propertiesOf(p Packet) []*Properties {
	switch p := p.(type) {
	case *Connect:
		if p.Will != nil {
			return []*Properties{&p.Properties, &p.Will.Properties}
		}
		return []*Properties{&p.Properties}
	case *Connack:
		return []*Properties{&p.Properties}
	case *Publish:
		return []*Properties{&p.Properties}
	case *Puback:
		return []*Properties{&p.Properties}
	case *Pubrec:
		return []*Properties{&p.Properties}
	case *Pubrel:
		return []*Properties{&p.Properties}
	case *Pubcomp:
		return []*Properties{&p.Properties}
	case *Subscribe:
		return []*Properties{&p.Properties}
	case *Suback:
		return []*Properties{&p.Properties}
	case *Unsubscribe:
		return []*Properties{&p.Properties}
	case *Unsuback:
		return []*Properties{&p.Properties}
	case *Disconnect:
		return []*Properties{&p.Properties}
	case *Auth:
		return []*Properties{&p.Properties}
	}
	return nil
}

// checkMany runs rapid.Check several times: each run draws a fresh seed,
// so this multiplies the cases without a command-line flag.
func checkMany(t *testing.T, prop func(*rapid.T)) {
	t.Helper()
	runs := 10
	if testing.Short() {
		runs = 1
	}
	for range runs {
		rapid.Check(t, prop)
	}
}
