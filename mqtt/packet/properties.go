package packet

import "strconv"

// PropertyID identifies an MQTT 5.0 property (spec 2.2.2.2).
type PropertyID byte

// Property identifiers.
const (
	PropPayloadFormat        PropertyID = 0x01
	PropMessageExpiry        PropertyID = 0x02
	PropContentType          PropertyID = 0x03
	PropResponseTopic        PropertyID = 0x08
	PropCorrelationData      PropertyID = 0x09
	PropSubscriptionID       PropertyID = 0x0B
	PropSessionExpiry        PropertyID = 0x11
	PropAssignedClientID     PropertyID = 0x12
	PropServerKeepAlive      PropertyID = 0x13
	PropAuthMethod           PropertyID = 0x15
	PropAuthData             PropertyID = 0x16
	PropRequestProblemInfo   PropertyID = 0x17
	PropWillDelay            PropertyID = 0x18
	PropRequestResponseInfo  PropertyID = 0x19
	PropResponseInfo         PropertyID = 0x1A
	PropServerReference      PropertyID = 0x1C
	PropReasonString         PropertyID = 0x1F
	PropReceiveMaximum       PropertyID = 0x21
	PropTopicAliasMaximum    PropertyID = 0x22
	PropTopicAlias           PropertyID = 0x23
	PropMaximumQoS           PropertyID = 0x24
	PropRetainAvailable      PropertyID = 0x25
	PropUserProperty         PropertyID = 0x26
	PropMaximumPacketSize    PropertyID = 0x27
	PropWildcardSubAvailable PropertyID = 0x28
	PropSubIDAvailable       PropertyID = 0x29
	PropSharedSubAvailable   PropertyID = 0x2A
)

var propNames = [...]string{
	PropPayloadFormat: "payload format indicator", PropMessageExpiry: "message expiry interval",
	PropContentType: "content type", PropResponseTopic: "response topic",
	PropCorrelationData: "correlation data", PropSubscriptionID: "subscription identifier",
	PropSessionExpiry: "session expiry interval", PropAssignedClientID: "assigned client identifier",
	PropServerKeepAlive: "server keep alive", PropAuthMethod: "authentication method",
	PropAuthData: "authentication data", PropRequestProblemInfo: "request problem information",
	PropWillDelay: "will delay interval", PropRequestResponseInfo: "request response information",
	PropResponseInfo: "response information", PropServerReference: "server reference",
	PropReasonString: "reason string", PropReceiveMaximum: "receive maximum",
	PropTopicAliasMaximum: "topic alias maximum", PropTopicAlias: "topic alias",
	PropMaximumQoS: "maximum QoS", PropRetainAvailable: "retain available",
	PropUserProperty: "user property", PropMaximumPacketSize: "maximum packet size",
	PropWildcardSubAvailable: "wildcard subscription available",
	PropSubIDAvailable:       "subscription identifier available",
	PropSharedSubAvailable:   "shared subscription available",
}

// String returns the specification's name of the property.
func (id PropertyID) String() string {
	if int(id) < len(propNames) && propNames[id] != "" {
		return propNames[id]
	}
	return "property 0x" + strconv.FormatUint(uint64(id), 16)
}

// Properties holds the 5.0 properties of a packet or of a Will. Every
// single-valued property has a presence bit besides its field, because
// absence and a zero value mean different things (an absent Maximum QoS is 2,
// a present 0 is 0). Decoding sets both; to send a property use its Set
// method, or assign the field and call Set. Encoding writes exactly the
// present properties, in identifier order, each user property in its
// place among the others, and fails if one is not allowed in the packet.
// Properties are ignored entirely under 3.1.1.
type Properties struct {
	present uint64

	PayloadFormat        byte   // 0 unspecified bytes, 1 UTF-8
	MessageExpiry        uint32 // seconds
	ContentType          string
	ResponseTopic        string
	CorrelationData      []byte
	SessionExpiry        uint32 // seconds
	AssignedClientID     string
	ServerKeepAlive      uint16 // seconds
	AuthMethod           string
	AuthData             []byte
	RequestProblemInfo   byte // 0 or 1
	WillDelay            uint32
	RequestResponseInfo  byte // 0 or 1
	ResponseInfo         string
	ServerReference      string
	ReasonString         string
	ReceiveMaximum       uint16
	TopicAliasMaximum    uint16
	TopicAlias           uint16
	MaximumQoS           byte // 0 or 1
	RetainAvailable      byte // 0 or 1
	MaximumPacketSize    uint32
	WildcardSubAvailable byte // 0 or 1
	SubIDAvailable       byte // 0 or 1
	SharedSubAvailable   byte // 0 or 1

	// SubscriptionIDs holds the Subscription Identifiers, 1 to
	// MaxSubscriptionID: any number in a PUBLISH, at most one in a
	// SUBSCRIBE. Present when non-empty.
	SubscriptionIDs []uint32
	// User holds the User Properties in wire order. Present when non-empty.
	User []UserProperty
}

func bit(id PropertyID) uint64 {
	if id >= 64 {
		return 0
	}
	return 1 << id
}

// Has reports whether the property is present. For the repeatable
// properties it reports whether there is at least one.
func (p *Properties) Has(id PropertyID) bool {
	switch id {
	case PropUserProperty:
		return len(p.User) > 0
	case PropSubscriptionID:
		return len(p.SubscriptionIDs) > 0
	}
	return p.present&bit(id) != 0
}

// Set marks a single-valued property present, to be sent with the value
// its field holds.
func (p *Properties) Set(id PropertyID) { p.present |= bit(id) }

// Clear marks a property absent and zeroes its field (for the repeatable
// ones, empties the slice).
func (p *Properties) Clear(id PropertyID) {
	p.present &^= bit(id)
	switch id {
	case PropPayloadFormat:
		p.PayloadFormat = 0
	case PropMessageExpiry:
		p.MessageExpiry = 0
	case PropContentType:
		p.ContentType = ""
	case PropResponseTopic:
		p.ResponseTopic = ""
	case PropCorrelationData:
		p.CorrelationData = nil
	case PropSubscriptionID:
		p.SubscriptionIDs = p.SubscriptionIDs[:0]
	case PropSessionExpiry:
		p.SessionExpiry = 0
	case PropAssignedClientID:
		p.AssignedClientID = ""
	case PropServerKeepAlive:
		p.ServerKeepAlive = 0
	case PropAuthMethod:
		p.AuthMethod = ""
	case PropAuthData:
		p.AuthData = nil
	case PropRequestProblemInfo:
		p.RequestProblemInfo = 0
	case PropWillDelay:
		p.WillDelay = 0
	case PropRequestResponseInfo:
		p.RequestResponseInfo = 0
	case PropResponseInfo:
		p.ResponseInfo = ""
	case PropServerReference:
		p.ServerReference = ""
	case PropReasonString:
		p.ReasonString = ""
	case PropReceiveMaximum:
		p.ReceiveMaximum = 0
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum = 0
	case PropTopicAlias:
		p.TopicAlias = 0
	case PropMaximumQoS:
		p.MaximumQoS = 0
	case PropRetainAvailable:
		p.RetainAvailable = 0
	case PropUserProperty:
		p.User = p.User[:0]
	case PropMaximumPacketSize:
		p.MaximumPacketSize = 0
	case PropWildcardSubAvailable:
		p.WildcardSubAvailable = 0
	case PropSubIDAvailable:
		p.SubIDAvailable = 0
	case PropSharedSubAvailable:
		p.SharedSubAvailable = 0
	}
}

// Reset removes every property, keeping the slices' capacity.
func (p *Properties) Reset() {
	*p = Properties{User: p.User[:0], SubscriptionIDs: p.SubscriptionIDs[:0]}
}

// Empty reports whether no property is present.
func (p *Properties) Empty() bool {
	return p.present == 0 && len(p.User) == 0 && len(p.SubscriptionIDs) == 0
}

// Setters: each stores the value and marks the property present.

// SetPayloadFormat sets the Payload Format Indicator (0 bytes, 1 UTF-8).
func (p *Properties) SetPayloadFormat(v byte) { p.PayloadFormat = v; p.Set(PropPayloadFormat) }

// SetMessageExpiry sets the Message Expiry Interval in seconds.
func (p *Properties) SetMessageExpiry(v uint32) { p.MessageExpiry = v; p.Set(PropMessageExpiry) }

// SetContentType sets the Content Type.
func (p *Properties) SetContentType(v string) { p.ContentType = v; p.Set(PropContentType) }

// SetResponseTopic sets the Response Topic.
func (p *Properties) SetResponseTopic(v string) { p.ResponseTopic = v; p.Set(PropResponseTopic) }

// SetCorrelationData sets the Correlation Data.
func (p *Properties) SetCorrelationData(v []byte) {
	p.CorrelationData = v
	p.Set(PropCorrelationData)
}

// SetSessionExpiry sets the Session Expiry Interval in seconds.
func (p *Properties) SetSessionExpiry(v uint32) { p.SessionExpiry = v; p.Set(PropSessionExpiry) }

// SetAssignedClientID sets the Assigned Client Identifier.
func (p *Properties) SetAssignedClientID(v string) {
	p.AssignedClientID = v
	p.Set(PropAssignedClientID)
}

// SetServerKeepAlive sets the Server Keep Alive in seconds.
func (p *Properties) SetServerKeepAlive(v uint16) {
	p.ServerKeepAlive = v
	p.Set(PropServerKeepAlive)
}

// SetAuthMethod sets the Authentication Method.
func (p *Properties) SetAuthMethod(v string) { p.AuthMethod = v; p.Set(PropAuthMethod) }

// SetAuthData sets the Authentication Data.
func (p *Properties) SetAuthData(v []byte) { p.AuthData = v; p.Set(PropAuthData) }

// SetRequestProblemInfo sets Request Problem Information (0 or 1).
func (p *Properties) SetRequestProblemInfo(v byte) {
	p.RequestProblemInfo = v
	p.Set(PropRequestProblemInfo)
}

// SetWillDelay sets the Will Delay Interval in seconds.
func (p *Properties) SetWillDelay(v uint32) { p.WillDelay = v; p.Set(PropWillDelay) }

// SetRequestResponseInfo sets Request Response Information (0 or 1).
func (p *Properties) SetRequestResponseInfo(v byte) {
	p.RequestResponseInfo = v
	p.Set(PropRequestResponseInfo)
}

// SetResponseInfo sets Response Information.
func (p *Properties) SetResponseInfo(v string) { p.ResponseInfo = v; p.Set(PropResponseInfo) }

// SetServerReference sets the Server Reference.
func (p *Properties) SetServerReference(v string) {
	p.ServerReference = v
	p.Set(PropServerReference)
}

// SetReasonString sets the Reason String.
func (p *Properties) SetReasonString(v string) { p.ReasonString = v; p.Set(PropReasonString) }

// SetReceiveMaximum sets the Receive Maximum (non-zero).
func (p *Properties) SetReceiveMaximum(v uint16) {
	p.ReceiveMaximum = v
	p.Set(PropReceiveMaximum)
}

// SetTopicAliasMaximum sets the Topic Alias Maximum.
func (p *Properties) SetTopicAliasMaximum(v uint16) {
	p.TopicAliasMaximum = v
	p.Set(PropTopicAliasMaximum)
}

// SetTopicAlias sets the Topic Alias (non-zero).
func (p *Properties) SetTopicAlias(v uint16) { p.TopicAlias = v; p.Set(PropTopicAlias) }

// SetMaximumQoS sets the Maximum QoS (0 or 1; absence means 2).
func (p *Properties) SetMaximumQoS(v byte) { p.MaximumQoS = v; p.Set(PropMaximumQoS) }

// SetRetainAvailable sets Retain Available (0 or 1).
func (p *Properties) SetRetainAvailable(v byte) {
	p.RetainAvailable = v
	p.Set(PropRetainAvailable)
}

// SetMaximumPacketSize sets the Maximum Packet Size (non-zero).
func (p *Properties) SetMaximumPacketSize(v uint32) {
	p.MaximumPacketSize = v
	p.Set(PropMaximumPacketSize)
}

// SetWildcardSubAvailable sets Wildcard Subscription Available (0 or 1).
func (p *Properties) SetWildcardSubAvailable(v byte) {
	p.WildcardSubAvailable = v
	p.Set(PropWildcardSubAvailable)
}

// SetSubIDAvailable sets Subscription Identifier Available (0 or 1).
func (p *Properties) SetSubIDAvailable(v byte) { p.SubIDAvailable = v; p.Set(PropSubIDAvailable) }

// SetSharedSubAvailable sets Shared Subscription Available (0 or 1).
func (p *Properties) SetSharedSubAvailable(v byte) {
	p.SharedSubAvailable = v
	p.Set(PropSharedSubAvailable)
}

// AddUser appends a User Property.
func (p *Properties) AddUser(key, value string) {
	p.User = append(p.User, UserProperty{Key: key, Value: value})
}

// AddSubscriptionID appends a Subscription Identifier.
func (p *Properties) AddSubscriptionID(id uint32) {
	p.SubscriptionIDs = append(p.SubscriptionIDs, id)
}

// propCtx names a place properties appear; a Will's properties differ from
// its CONNECT's, and the four publish acknowledgements share one set.
type propCtx uint8

const (
	ctxConnect propCtx = iota
	ctxWill
	ctxConnack
	ctxPublish
	ctxAck
	ctxSubscribe
	ctxSuback
	ctxUnsubscribe
	ctxUnsuback
	ctxDisconnect
	ctxAuth
)

func bits(ids ...PropertyID) uint64 {
	var m uint64
	for _, id := range ids {
		m |= bit(id)
	}
	return m
}

// allowed lists, per place, the properties it may carry (spec 2.2.2.2).
// User Property is allowed everywhere.
var allowed = [...]uint64{
	ctxConnect: bits(PropSessionExpiry, PropAuthMethod, PropAuthData, PropRequestProblemInfo,
		PropRequestResponseInfo, PropReceiveMaximum, PropTopicAliasMaximum, PropUserProperty,
		PropMaximumPacketSize),
	ctxWill: bits(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropWillDelay, PropUserProperty),
	ctxConnack: bits(PropSessionExpiry, PropAssignedClientID, PropServerKeepAlive, PropAuthMethod,
		PropAuthData, PropResponseInfo, PropServerReference, PropReasonString, PropReceiveMaximum,
		PropTopicAliasMaximum, PropMaximumQoS, PropRetainAvailable, PropUserProperty,
		PropMaximumPacketSize, PropWildcardSubAvailable, PropSubIDAvailable,
		PropSharedSubAvailable),
	ctxPublish: bits(PropPayloadFormat, PropMessageExpiry, PropContentType, PropResponseTopic,
		PropCorrelationData, PropSubscriptionID, PropTopicAlias, PropUserProperty),
	ctxAck:         bits(PropReasonString, PropUserProperty),
	ctxSubscribe:   bits(PropSubscriptionID, PropUserProperty),
	ctxSuback:      bits(PropReasonString, PropUserProperty),
	ctxUnsubscribe: bits(PropUserProperty),
	ctxUnsuback:    bits(PropReasonString, PropUserProperty),
	ctxDisconnect:  bits(PropSessionExpiry, PropServerReference, PropReasonString, PropUserProperty),
	ctxAuth:        bits(PropAuthMethod, PropAuthData, PropReasonString, PropUserProperty),
}

// decode reads a property length and the properties after it into p,
// which must be empty (Reset). Identifiers not allowed in ctx are malformed
// [spec 2.2.2.2]; a single-valued property given twice is a protocol error.
func (p *Properties) decode(d *decoder, ctx propCtx) {
	n := d.vbi("property length")
	if d.err != nil {
		return
	}
	if int(n) > d.remaining() {
		d.fail(ErrMalformed, "property length exceeds packet")
		return
	}
	end := d.off + int(n)
	whole := d.buf
	d.buf = whole[:end]
	// Size the repeatable properties' slices exactly before filling them:
	// growing them by append would allocate several times their final
	// size for a packet made of nothing else.
	users, ids := countRepeated(d.buf[d.off:])
	p.User = reserve(p.User, users)
	p.SubscriptionIDs = reserve(p.SubscriptionIDs, ids)
	for d.err == nil && d.off < end {
		id := PropertyID(d.u8("property identifier"))
		if allowed[ctx]&bit(id) == 0 {
			d.fail(ErrMalformed, "property "+id.String()+" not allowed here")
			break
		}
		if p.present&bit(id) != 0 {
			d.fail(ErrProtocol, "property "+id.String()+" repeated")
			break
		}
		if id != PropUserProperty && id != PropSubscriptionID {
			p.present |= bit(id)
		}
		p.decodeOne(d, id, ctx)
	}
	d.buf = whole
	if d.err != nil {
		return
	}
	if sentinel, detail := p.check(ctx); sentinel != nil {
		d.fail(sentinel, detail)
	}
}

// reserve makes room for n more elements with one allocation of exactly
// that room. (slices.Grow can allocate twice in instrumented builds.)
func reserve[T any](s []T, n int) []T {
	if cap(s)-len(s) >= n {
		return s
	}
	ns := make([]T, len(s), len(s)+n)
	copy(ns, s)
	return ns
}

// propSize gives, per property identifier, the size of its value: a fixed
// size, or one of the variable kinds below.
var propSize = [...]int8{
	PropPayloadFormat: 1, PropMessageExpiry: 4, PropContentType: sizeStr,
	PropResponseTopic: sizeStr, PropCorrelationData: sizeStr, PropSubscriptionID: sizeVBI,
	PropSessionExpiry: 4, PropAssignedClientID: sizeStr, PropServerKeepAlive: 2,
	PropAuthMethod: sizeStr, PropAuthData: sizeStr, PropRequestProblemInfo: 1, PropWillDelay: 4,
	PropRequestResponseInfo: 1, PropResponseInfo: sizeStr, PropServerReference: sizeStr,
	PropReasonString: sizeStr, PropReceiveMaximum: 2, PropTopicAliasMaximum: 2, PropTopicAlias: 2,
	PropMaximumQoS: 1, PropRetainAvailable: 1, PropUserProperty: sizePair,
	PropMaximumPacketSize: 4, PropWildcardSubAvailable: 1, PropSubIDAvailable: 1,
	PropSharedSubAvailable: 1,
}

const (
	sizeStr  = -1 // two-byte length and data
	sizePair = -2 // two strings
	sizeVBI  = -3 // variable byte integer
)

// countRepeated counts the User Properties and Subscription Identifiers in
// an encoded property list. It stops quietly at anything malformed, which
// the decoding pass then reports.
func countRepeated(b []byte) (users, ids int) {
	str := func(i int) int {
		if i+2 > len(b) {
			return len(b) + 1
		}
		return i + 2 + (int(b[i])<<8 | int(b[i+1]))
	}
	for i := 0; i < len(b); {
		id := int(b[i])
		i++
		if id >= len(propSize) || propSize[id] == 0 {
			return
		}
		switch k := propSize[id]; k {
		case sizeStr:
			i = str(i)
		case sizePair:
			i = str(str(i))
			users++
		case sizeVBI:
			for i < len(b) && b[i] >= 0x80 {
				i++
			}
			i++
			ids++
		default:
			i += int(k)
		}
	}
	return users, ids
}

func (p *Properties) decodeOne(d *decoder, id PropertyID, ctx propCtx) {
	what := id.String()
	switch id {
	case PropPayloadFormat:
		p.PayloadFormat = d.u8(what)
	case PropMessageExpiry:
		p.MessageExpiry = d.u32(what)
	case PropContentType:
		p.ContentType = d.str(what)
	case PropResponseTopic:
		p.ResponseTopic = d.str(what)
	case PropCorrelationData:
		p.CorrelationData = d.bin(what)
	case PropSubscriptionID:
		if ctx == ctxSubscribe && len(p.SubscriptionIDs) > 0 {
			d.fail(ErrProtocol, "property "+what+" repeated")
			return
		}
		v := d.vbi(what)
		if d.err == nil {
			p.SubscriptionIDs = append(p.SubscriptionIDs, v)
		}
	case PropSessionExpiry:
		p.SessionExpiry = d.u32(what)
	case PropAssignedClientID:
		p.AssignedClientID = d.str(what)
	case PropServerKeepAlive:
		p.ServerKeepAlive = d.u16(what)
	case PropAuthMethod:
		p.AuthMethod = d.str(what)
	case PropAuthData:
		p.AuthData = d.bin(what)
	case PropRequestProblemInfo:
		p.RequestProblemInfo = d.u8(what)
	case PropWillDelay:
		p.WillDelay = d.u32(what)
	case PropRequestResponseInfo:
		p.RequestResponseInfo = d.u8(what)
	case PropResponseInfo:
		p.ResponseInfo = d.str(what)
	case PropServerReference:
		p.ServerReference = d.str(what)
	case PropReasonString:
		p.ReasonString = d.str(what)
	case PropReceiveMaximum:
		p.ReceiveMaximum = d.u16(what)
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum = d.u16(what)
	case PropTopicAlias:
		p.TopicAlias = d.u16(what)
	case PropMaximumQoS:
		p.MaximumQoS = d.u8(what)
	case PropRetainAvailable:
		p.RetainAvailable = d.u8(what)
	case PropUserProperty:
		k := d.str("user property name")
		v := d.str("user property value")
		if d.err == nil {
			p.User = append(p.User, UserProperty{Key: k, Value: v})
		}
	case PropMaximumPacketSize:
		p.MaximumPacketSize = d.u32(what)
	case PropWildcardSubAvailable:
		p.WildcardSubAvailable = d.u8(what)
	case PropSubIDAvailable:
		p.SubIDAvailable = d.u8(what)
	case PropSharedSubAvailable:
		p.SharedSubAvailable = d.u8(what)
	}
}

// check applies the value rules of the present properties, shared by the
// decoder (which reports them to the peer) and the encoder (which refuses
// to send them). It returns the sentinel and detail of the first failure.
func (p *Properties) check(ctx propCtx) (error, string) {
	if p.present == 0 && len(p.SubscriptionIDs) == 0 {
		return nil, ""
	}
	for _, id := range [...]PropertyID{PropPayloadFormat, PropRequestProblemInfo,
		PropRequestResponseInfo, PropMaximumQoS, PropRetainAvailable,
		PropWildcardSubAvailable, PropSubIDAvailable, PropSharedSubAvailable} {
		if p.present&bit(id) != 0 && p.byteValue(id) > 1 {
			return ErrProtocol, "property " + id.String() + " is neither 0 nor 1"
		}
	}
	if p.Has(PropReceiveMaximum) && p.ReceiveMaximum == 0 {
		return ErrProtocol, "receive maximum is 0"
	}
	if p.Has(PropMaximumPacketSize) && p.MaximumPacketSize == 0 {
		return ErrProtocol, "maximum packet size is 0"
	}
	if p.Has(PropTopicAlias) && p.TopicAlias == 0 {
		return ErrTopicAliasInvalid, "topic alias is 0"
	}
	if p.Has(PropResponseTopic) && !ValidTopicName(p.ResponseTopic) {
		return ErrProtocol, "response topic is not a valid topic name"
	}
	if p.Has(PropAuthData) && !p.Has(PropAuthMethod) {
		return ErrProtocol, "authentication data without authentication method"
	}
	for _, id := range p.SubscriptionIDs {
		if id == 0 || id > MaxSubscriptionID {
			return ErrProtocol, "subscription identifier out of range"
		}
	}
	return nil, ""
}

func (p *Properties) byteValue(id PropertyID) byte {
	switch id {
	case PropPayloadFormat:
		return p.PayloadFormat
	case PropRequestProblemInfo:
		return p.RequestProblemInfo
	case PropRequestResponseInfo:
		return p.RequestResponseInfo
	case PropMaximumQoS:
		return p.MaximumQoS
	case PropRetainAvailable:
		return p.RetainAvailable
	case PropWildcardSubAvailable:
		return p.WildcardSubAvailable
	case PropSubIDAvailable:
		return p.SubIDAvailable
	case PropSharedSubAvailable:
		return p.SharedSubAvailable
	}
	return 0
}

// size returns the encoded length of the properties (without the property
// length in front) and checks that they can be sent in ctx.
func (p *Properties) size(ctx propCtx, t Type, v Version) (int, error) {
	if p.Empty() {
		return 0, nil
	}
	if p.present&^allowed[ctx] != 0 || (len(p.SubscriptionIDs) > 0 && allowed[ctx]&bit(PropSubscriptionID) == 0) {
		return 0, invalid(t, v, "property not allowed in this packet")
	}
	if ctx == ctxSubscribe && len(p.SubscriptionIDs) > 1 {
		return 0, invalid(t, v, "more than one subscription identifier")
	}
	if _, detail := p.check(ctx); detail != "" {
		return 0, invalid(t, v, detail)
	}
	n := 0
	var err error
	has := func(id PropertyID) bool { return p.present&bit(id) != 0 }
	str := func(id PropertyID, k int) {
		if has(id) {
			if k > maxStr && err == nil {
				err = invalid(t, v, id.String()+" longer than 65535 bytes")
			}
			n += 3 + k
		}
	}
	fixed := func(id PropertyID, k int) {
		if has(id) {
			n += 1 + k
		}
	}
	fixed(PropPayloadFormat, 1)
	fixed(PropMessageExpiry, 4)
	str(PropContentType, len(p.ContentType))
	str(PropResponseTopic, len(p.ResponseTopic))
	str(PropCorrelationData, len(p.CorrelationData))
	for _, id := range p.SubscriptionIDs {
		n += 1 + vbiLen(int(id))
	}
	fixed(PropSessionExpiry, 4)
	str(PropAssignedClientID, len(p.AssignedClientID))
	fixed(PropServerKeepAlive, 2)
	str(PropAuthMethod, len(p.AuthMethod))
	str(PropAuthData, len(p.AuthData))
	fixed(PropRequestProblemInfo, 1)
	fixed(PropWillDelay, 4)
	fixed(PropRequestResponseInfo, 1)
	str(PropResponseInfo, len(p.ResponseInfo))
	str(PropServerReference, len(p.ServerReference))
	str(PropReasonString, len(p.ReasonString))
	fixed(PropReceiveMaximum, 2)
	fixed(PropTopicAliasMaximum, 2)
	fixed(PropTopicAlias, 2)
	fixed(PropMaximumQoS, 1)
	fixed(PropRetainAvailable, 1)
	for _, u := range p.User {
		if len(u.Key) > maxStr || len(u.Value) > maxStr {
			return 0, invalid(t, v, "user property longer than 65535 bytes")
		}
		n += 5 + len(u.Key) + len(u.Value)
	}
	fixed(PropMaximumPacketSize, 4)
	fixed(PropWildcardSubAvailable, 1)
	fixed(PropSubIDAvailable, 1)
	fixed(PropSharedSubAvailable, 1)
	if err != nil {
		return 0, err
	}
	if n > MaxRemainingLength {
		return 0, invalid(t, v, "properties too long")
	}
	return n, nil
}

// sizeWithLength is size plus the property length in front of it.
func (p *Properties) sizeWithLength(ctx propCtx, t Type, v Version) (int, int, error) {
	n, err := p.size(ctx, t, v)
	if err != nil {
		return 0, 0, err
	}
	return n, vbiLen(n) + n, nil
}

// appendTo writes the property length n (from size) and the properties.
func (p *Properties) appendTo(dst []byte, n int) []byte {
	dst = appendVBI(dst, n)
	if n == 0 {
		return dst
	}
	has := func(id PropertyID) bool { return p.present&bit(id) != 0 }
	if has(PropPayloadFormat) {
		dst = append(dst, byte(PropPayloadFormat), p.PayloadFormat)
	}
	if has(PropMessageExpiry) {
		dst = appendU32(append(dst, byte(PropMessageExpiry)), p.MessageExpiry)
	}
	if has(PropContentType) {
		dst = appendStr(append(dst, byte(PropContentType)), p.ContentType)
	}
	if has(PropResponseTopic) {
		dst = appendStr(append(dst, byte(PropResponseTopic)), p.ResponseTopic)
	}
	if has(PropCorrelationData) {
		dst = appendBin(append(dst, byte(PropCorrelationData)), p.CorrelationData)
	}
	for _, id := range p.SubscriptionIDs {
		dst = appendVBI(append(dst, byte(PropSubscriptionID)), int(id))
	}
	if has(PropSessionExpiry) {
		dst = appendU32(append(dst, byte(PropSessionExpiry)), p.SessionExpiry)
	}
	if has(PropAssignedClientID) {
		dst = appendStr(append(dst, byte(PropAssignedClientID)), p.AssignedClientID)
	}
	if has(PropServerKeepAlive) {
		dst = appendU16(append(dst, byte(PropServerKeepAlive)), p.ServerKeepAlive)
	}
	if has(PropAuthMethod) {
		dst = appendStr(append(dst, byte(PropAuthMethod)), p.AuthMethod)
	}
	if has(PropAuthData) {
		dst = appendBin(append(dst, byte(PropAuthData)), p.AuthData)
	}
	if has(PropRequestProblemInfo) {
		dst = append(dst, byte(PropRequestProblemInfo), p.RequestProblemInfo)
	}
	if has(PropWillDelay) {
		dst = appendU32(append(dst, byte(PropWillDelay)), p.WillDelay)
	}
	if has(PropRequestResponseInfo) {
		dst = append(dst, byte(PropRequestResponseInfo), p.RequestResponseInfo)
	}
	if has(PropResponseInfo) {
		dst = appendStr(append(dst, byte(PropResponseInfo)), p.ResponseInfo)
	}
	if has(PropServerReference) {
		dst = appendStr(append(dst, byte(PropServerReference)), p.ServerReference)
	}
	if has(PropReasonString) {
		dst = appendStr(append(dst, byte(PropReasonString)), p.ReasonString)
	}
	if has(PropReceiveMaximum) {
		dst = appendU16(append(dst, byte(PropReceiveMaximum)), p.ReceiveMaximum)
	}
	if has(PropTopicAliasMaximum) {
		dst = appendU16(append(dst, byte(PropTopicAliasMaximum)), p.TopicAliasMaximum)
	}
	if has(PropTopicAlias) {
		dst = appendU16(append(dst, byte(PropTopicAlias)), p.TopicAlias)
	}
	if has(PropMaximumQoS) {
		dst = append(dst, byte(PropMaximumQoS), p.MaximumQoS)
	}
	if has(PropRetainAvailable) {
		dst = append(dst, byte(PropRetainAvailable), p.RetainAvailable)
	}
	for _, u := range p.User {
		dst = appendStr(append(dst, byte(PropUserProperty)), u.Key)
		dst = appendStr(dst, u.Value)
	}
	if has(PropMaximumPacketSize) {
		dst = appendU32(append(dst, byte(PropMaximumPacketSize)), p.MaximumPacketSize)
	}
	if has(PropWildcardSubAvailable) {
		dst = append(dst, byte(PropWildcardSubAvailable), p.WildcardSubAvailable)
	}
	if has(PropSubIDAvailable) {
		dst = append(dst, byte(PropSubIDAvailable), p.SubIDAvailable)
	}
	if has(PropSharedSubAvailable) {
		dst = append(dst, byte(PropSharedSubAvailable), p.SharedSubAvailable)
	}
	return dst
}
