package packet

import (
	"bytes"
	"errors"
	"io"
	"reflect"
)

// Shared test helpers: encoding, decoding through every entry point,
// canonical forms for comparison, and the 3.1.1 view of a 5.0 packet.

// failer is what the helpers need of a test: both *testing.T and
// *rapid.T provide it.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// encode appends p for v and checks that Size agreed.
func encode(tb failer, p Packet, v Version) []byte {
	tb.Helper()
	b, err := p.Append(nil, v)
	if err != nil {
		tb.Fatalf("encode %v for %v: %v", p.Type(), v, err)
	}
	n, err := p.Size(v)
	if err != nil || n != len(b) {
		tb.Fatalf("%v for %v: Size = %d, %v; Append wrote %d bytes", p.Type(), v, n, err, len(b))
	}
	return b
}

// readerVersion is the level a Reader must hold to decode p: a server
// Reader learns it from the CONNECT itself.
func readerVersion(t Type, v Version) Version {
	if t == TypeConnect {
		return 0
	}
	return v
}

// decodeOne decodes b, which must hold exactly one packet, through a Reader
// over a plain io.Reader, a Reader over a bufio-like ByteReader, and
// Decode, and checks that all three agree and consumed exactly b.
func decodeOne(tb failer, b []byte, v Version) Packet {
	tb.Helper()
	t := Type(b[0] >> 4)
	rv := readerVersion(t, v)
	plain := &countingReader{r: bytes.NewReader(b)}
	r1 := NewReader(plain, 0)
	r1.SetVersion(rv)
	p1, err := r1.ReadPacket()
	if err != nil {
		tb.Fatalf("Reader: decode %v for %v: %v\n% x", t, v, err, b)
	}
	if plain.n != len(b) {
		tb.Fatalf("Reader consumed %d of %d bytes", plain.n, len(b))
	}
	r2 := NewReader(bytes.NewReader(b), 0)
	r2.SetVersion(rv)
	p2, err := r2.ReadPacket()
	if err != nil {
		tb.Fatalf("ByteReader: decode %v: %v", t, err)
	}
	p3, n, err := Decode(b, rv, 0)
	if err != nil || n != len(b) {
		tb.Fatalf("Decode: %v, n=%d of %d", err, n, len(b))
	}
	c1, c2, c3 := canon(p1), canon(p2), canon(p3)
	if !reflect.DeepEqual(c1, c2) || !reflect.DeepEqual(c1, c3) {
		tb.Fatalf("entry points disagree:\n%#v\n%#v\n%#v", c1, c2, c3)
	}
	return p1
}

// countingReader counts the bytes read through it and offers no
// ByteReader, so a Reader over it must read exactly what it needs.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// canon returns a deep copy of p with empty slices as nil and the reuse
// bookkeeping of Publish dropped, for reflect.DeepEqual.
func canon(p Packet) Packet {
	switch p := p.(type) {
	case *Connect:
		c := *p
		c.Properties = canonProps(p.Properties)
		c.Password = canonBytes(p.Password)
		if p.Will != nil {
			w := *p.Will
			w.Payload = canonBytes(w.Payload)
			w.Properties = canonProps(w.Properties)
			c.Will = &w
		}
		return &c
	case *Connack:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Publish:
		c := Publish{Topic: p.Topic, PacketID: p.PacketID, QoS: p.QoS, Retain: p.Retain, Dup: p.Dup,
			Properties: canonProps(p.Properties), Payload: canonBytes(p.Payload)}
		return &c
	case *Puback:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Pubrec:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Pubrel:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Pubcomp:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Subscribe:
		c := *p
		c.Properties = canonProps(p.Properties)
		c.Subscriptions = canonSlice(p.Subscriptions)
		return &c
	case *Suback:
		c := *p
		c.Properties = canonProps(p.Properties)
		c.ReasonCodes = canonSlice(p.ReasonCodes)
		return &c
	case *Unsubscribe:
		c := *p
		c.Properties = canonProps(p.Properties)
		c.Filters = canonSlice(p.Filters)
		return &c
	case *Unsuback:
		c := *p
		c.Properties = canonProps(p.Properties)
		c.ReasonCodes = canonSlice(p.ReasonCodes)
		return &c
	case *Disconnect:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	case *Auth:
		c := *p
		c.Properties = canonProps(p.Properties)
		return &c
	}
	return p
}

func canonBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func canonSlice[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return append([]T(nil), s...)
}

func canonProps(p Properties) Properties {
	c := p
	c.CorrelationData = canonBytes(p.CorrelationData)
	c.AuthData = canonBytes(p.AuthData)
	c.User = canonSlice(p.User)
	c.SubscriptionIDs = canonSlice(p.SubscriptionIDs)
	return c
}

// downgrade returns what p decodes as after being encoded for v: under
// 3.1.1 every 5.0-only field is gone and reason codes collapse to what
// 3.1.1 can say.
func downgrade(p Packet, v Version) Packet {
	c := canon(p)
	if v == V5 {
		if cp, ok := c.(*Connect); ok {
			cp.Version = V5
		}
		return c
	}
	switch c := c.(type) {
	case *Connect:
		c.Version = V311
		c.Properties = Properties{}
		if c.Will != nil {
			c.Will.Properties = Properties{}
		}
	case *Connack:
		c.Properties = Properties{}
		code, _ := ConnackReturnCode311(c.ReasonCode)
		c.ReasonCode = connackV311[code]
	case *Publish:
		c.Properties = Properties{}
	case *Puback:
		c.Properties, c.ReasonCode = Properties{}, Success
	case *Pubrec:
		c.Properties, c.ReasonCode = Properties{}, Success
	case *Pubrel:
		c.Properties, c.ReasonCode = Properties{}, Success
	case *Pubcomp:
		c.Properties, c.ReasonCode = Properties{}, Success
	case *Subscribe:
		c.Properties = Properties{}
		for i := range c.Subscriptions {
			s := &c.Subscriptions[i]
			s.NoLocal, s.RetainAsPublished, s.RetainHandling = false, false, SendRetained
		}
	case *Suback:
		c.Properties = Properties{}
		for i, rc := range c.ReasonCodes {
			if rc.IsError() {
				c.ReasonCodes[i] = UnspecifiedError
			}
		}
	case *Unsubscribe:
		c.Properties = Properties{}
	case *Unsuback:
		c.Properties, c.ReasonCodes = Properties{}, nil
	case *Disconnect:
		c.Properties, c.ReasonCode = Properties{}, NormalDisconnection
	}
	return c
}

// wantCodecError fails unless err is a *Error wrapping sentinel with code.
func wantCodecError(tb failer, err error, sentinel error, code ReasonCode) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("no error; want %v", sentinel)
	}
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("error %v (%T) is not a *Error", err, err)
	}
	if !errors.Is(err, sentinel) {
		tb.Fatalf("error %v does not wrap %v", err, sentinel)
	}
	if e.Code != code {
		tb.Fatalf("error %v has code %#x (%v); want %#x (%v)", err, byte(e.Code), e.Code, byte(code), code)
	}
	if rc, ok := ReasonCodeOf(err); !ok || rc != code {
		tb.Fatalf("ReasonCodeOf = %v, %v", rc, ok)
	}
}

// allProps returns properties holding every property allowed in ctx, with
// values that exercise multi-byte encodings.
func allProps(ctx propCtx) Properties {
	var p Properties
	m := allowed[ctx]
	if m&bit(PropPayloadFormat) != 0 {
		p.SetPayloadFormat(1)
	}
	if m&bit(PropMessageExpiry) != 0 {
		p.SetMessageExpiry(0xdeadbeef)
	}
	if m&bit(PropContentType) != 0 {
		p.SetContentType("application/json; charset=utf-8")
	}
	if m&bit(PropResponseTopic) != 0 {
		p.SetResponseTopic("reply/to/ü")
	}
	if m&bit(PropCorrelationData) != 0 {
		p.SetCorrelationData([]byte{0, 1, 2, 0xff})
	}
	if m&bit(PropSubscriptionID) != 0 {
		p.AddSubscriptionID(MaxSubscriptionID)
		if ctx == ctxPublish {
			p.AddSubscriptionID(1)
			p.AddSubscriptionID(200)
		}
	}
	if m&bit(PropSessionExpiry) != 0 {
		p.SetSessionExpiry(0xffffffff)
	}
	if m&bit(PropAssignedClientID) != 0 {
		p.SetAssignedClientID("auto-7f3a")
	}
	if m&bit(PropServerKeepAlive) != 0 {
		p.SetServerKeepAlive(0) // present zero differs from absent
	}
	if m&bit(PropAuthMethod) != 0 {
		p.SetAuthMethod("SCRAM-SHA-256")
	}
	if m&bit(PropAuthData) != 0 {
		p.SetAuthData([]byte("client-first"))
	}
	if m&bit(PropRequestProblemInfo) != 0 {
		p.SetRequestProblemInfo(0)
	}
	if m&bit(PropWillDelay) != 0 {
		p.SetWillDelay(30)
	}
	if m&bit(PropRequestResponseInfo) != 0 {
		p.SetRequestResponseInfo(1)
	}
	if m&bit(PropResponseInfo) != 0 {
		p.SetResponseInfo("resp/")
	}
	if m&bit(PropServerReference) != 0 {
		p.SetServerReference("other.example:1883")
	}
	if m&bit(PropReasonString) != 0 {
		p.SetReasonString("because ☃")
	}
	if m&bit(PropReceiveMaximum) != 0 {
		p.SetReceiveMaximum(65535)
	}
	if m&bit(PropTopicAliasMaximum) != 0 {
		p.SetTopicAliasMaximum(10)
	}
	if m&bit(PropTopicAlias) != 0 {
		p.SetTopicAlias(3)
	}
	if m&bit(PropMaximumQoS) != 0 {
		p.SetMaximumQoS(1)
	}
	if m&bit(PropRetainAvailable) != 0 {
		p.SetRetainAvailable(0)
	}
	if m&bit(PropMaximumPacketSize) != 0 {
		p.SetMaximumPacketSize(1 << 20)
	}
	if m&bit(PropWildcardSubAvailable) != 0 {
		p.SetWildcardSubAvailable(0)
	}
	if m&bit(PropSubIDAvailable) != 0 {
		p.SetSubIDAvailable(1)
	}
	if m&bit(PropSharedSubAvailable) != 0 {
		p.SetSharedSubAvailable(0)
	}
	p.AddUser("k", "v1")
	p.AddUser("", "")
	p.AddUser("k", "v2") // repeated key, order kept
	return p
}

// equalPackets compares two packets in canonical form.
func equalPackets(a, b Packet) bool {
	return reflect.DeepEqual(canon(a), canon(b))
}

// propertyIDs lists every defined property identifier.
func propertyIDs() []PropertyID {
	var ids []PropertyID
	for id, name := range propNames {
		if name != "" {
			ids = append(ids, PropertyID(id))
		}
	}
	return ids
}
