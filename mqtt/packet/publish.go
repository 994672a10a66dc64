package packet

import "unicode/utf8"

// Publish is a PUBLISH packet. A Publish returned by a Reader points into a
// buffer it owns (see the package comment) and goes back to its Reader on
// Release; one built by the caller or returned by Decode owns nothing.
type Publish struct {
	// Topic is the topic name; under 5.0 it may be empty when
	// Properties carries a Topic Alias.
	Topic string
	// PacketID is the packet identifier, non-zero for QoS 1 and 2 and
	// absent (0) for QoS 0.
	PacketID uint16
	// QoS is the delivery QoS.
	QoS QoS
	// Retain is the RETAIN flag.
	Retain bool
	// Dup is the DUP flag; it must be false for QoS 0 [MQTT-3.3.1-2].
	Dup bool
	// Properties are the PUBLISH properties (5.0).
	Properties Properties
	// Payload is the application message.
	Payload []byte

	// owner is the Reader whose free list the packet returns to, self
	// the packet itself, so that a copy of the struct cannot release the
	// original's buffer; buf is the owned body buffer.
	owner *Reader
	self  *Publish
	buf   []byte
}

// Type returns TypePublish.
func (*Publish) Type() Type { return TypePublish }

// Release hands the packet and its buffer back to the Reader that returned
// it. Afterwards neither the packet nor any slice taken from it may be used.
// It is safe to call from any goroutine, more than once, and on packets
// that did not come from a Reader (then it does nothing).
func (p *Publish) Release() {
	if p.self != p || p.owner == nil {
		return
	}
	r := p.owner
	p.owner = nil
	r.putPublish(p)
}

// Clone returns a copy of p that owns all of its memory, for keeping a
// message beyond the original's Release.
func (p *Publish) Clone() *Publish {
	c := &Publish{Topic: p.Topic, PacketID: p.PacketID, QoS: p.QoS, Retain: p.Retain, Dup: p.Dup,
		Properties: p.Properties, Payload: clone(p.Payload)}
	c.Properties.CorrelationData = clone(p.Properties.CorrelationData)
	c.Properties.AuthData = clone(p.Properties.AuthData)
	c.Properties.User = clone(p.Properties.User)
	c.Properties.SubscriptionIDs = clone(p.Properties.SubscriptionIDs)
	return c
}

// clone copies s, keeping nil and empty apart.
func clone[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// CheckPayloadFormat returns an error wrapping ErrPayloadFormatInvalid when
// the Payload Format Indicator says UTF-8 and the payload is not. A Reader
// performs this check unless told not to; a broker that prefers to answer
// with a PUBACK or PUBREC carrying 0x99 turns that off and calls this.
func (p *Publish) CheckPayloadFormat() error {
	if p.Properties.Has(PropPayloadFormat) && p.Properties.PayloadFormat == 1 && !utf8.Valid(p.Payload) {
		return newError(ErrPayloadFormatInvalid, TypePublish, 0, "payload is not UTF-8")
	}
	return nil
}

const (
	publishDup    = 0x08
	publishRetain = 0x01
)

// decode fills p (whose Properties are empty) from the body in d.
func (p *Publish) decode(d *decoder, flags byte, checkPayload bool) {
	p.QoS = QoS(flags >> 1 & 3)
	p.Dup = flags&publishDup != 0
	p.Retain = flags&publishRetain != 0
	if p.QoS == 3 {
		d.fail(ErrMalformed, "QoS is 3") // [MQTT-3.3.1-4]
		return
	}
	if p.Dup && p.QoS == QoS0 {
		d.fail(ErrProtocol, "DUP set on a QoS 0 message") // [MQTT-3.3.1-2]
		return
	}
	topic := d.raw("topic name")
	if d.err != nil {
		return
	}
	if !validTopicChars(topic) {
		if !validUTF8(topic) {
			d.fail(ErrMalformed, "topic name: not well-formed UTF-8 or contains U+0000")
		} else {
			d.fail(ErrProtocol, "topic name contains a wildcard") // [MQTT-3.3.2-2]
		}
		return
	}
	p.Topic = d.in.get(topic)
	p.PacketID = 0
	if p.QoS > QoS0 {
		p.PacketID = d.packetID()
	}
	if d.v == V5 {
		p.Properties.decode(d, ctxPublish)
	}
	if d.err != nil {
		return
	}
	if p.Topic == "" && !p.Properties.Has(PropTopicAlias) {
		d.fail(ErrProtocol, "empty topic name without a topic alias") // [MQTT-4.7.3-1]
		return
	}
	rest := d.buf[d.off:]
	d.off = len(d.buf)
	if d.alias {
		p.Payload = rest
	} else {
		p.Payload = append([]byte{}, rest...)
	}
	if checkPayload && p.Properties.PayloadFormat == 1 && !utf8.Valid(p.Payload) {
		d.fail(ErrPayloadFormatInvalid, "payload is not UTF-8")
	}
}

// remaining returns the remaining length without the payload and the
// property length. It checks structure only: the topic's characters are
// not re-validated on the way out.
func (p *Publish) remaining(v Version) (head, props int, err error) {
	t := TypePublish
	switch {
	case !v.Supported():
		return 0, 0, invalid(t, v, "unsupported protocol level")
	case p.QoS > QoS2:
		return 0, 0, invalid(t, v, "QoS over 2")
	case p.Dup && p.QoS == QoS0:
		return 0, 0, invalid(t, v, "DUP set on a QoS 0 message")
	case p.QoS > QoS0 && p.PacketID == 0:
		return 0, 0, invalid(t, v, "packet identifier is 0")
	case len(p.Topic) > maxStr:
		return 0, 0, invalid(t, v, "topic longer than 65535 bytes")
	}
	head = 2 + len(p.Topic)
	if p.QoS > QoS0 {
		head += 2
	}
	if v == V5 {
		if p.Topic == "" && !p.Properties.Has(PropTopicAlias) {
			return 0, 0, invalid(t, v, "empty topic name without a topic alias")
		}
		var k int
		props, k, err = p.Properties.sizeWithLength(ctxPublish, t, v)
		if err != nil {
			return 0, 0, err
		}
		head += k
	} else if p.Topic == "" {
		return 0, 0, invalid(t, v, "empty topic name")
	}
	return head, props, nil
}

// Size returns the encoded size of the packet for level v.
func (p *Publish) Size(v Version) (int, error) {
	head, _, err := p.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypePublish, v, head+len(p.Payload))
}

// Append appends the packet encoded for level v.
func (p *Publish) Append(dst []byte, v Version) ([]byte, error) {
	head, props, err := p.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypePublish, v, head+len(p.Payload))
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = p.appendHead(dst, v, head, props)
	return append(dst, p.Payload...), nil
}

// AppendHeader appends everything of the encoding for level v except the
// payload, so that a writer can send a large payload from where it lies
// (a vectored write) instead of copying it. The payload must follow.
func (p *Publish) AppendHeader(dst []byte, v Version) ([]byte, error) {
	head, props, err := p.remaining(v)
	if err != nil {
		return dst, err
	}
	if _, err := packetSize(TypePublish, v, head+len(p.Payload)); err != nil {
		return dst, err
	}
	return p.appendHead(dst, v, head, props), nil
}

func (p *Publish) appendHead(dst []byte, v Version, head, props int) []byte {
	flags := byte(p.QoS) << 1
	if p.Dup {
		flags |= publishDup
	}
	if p.Retain {
		flags |= publishRetain
	}
	dst = appendHeader(dst, TypePublish, flags, head+len(p.Payload))
	dst = appendStr(dst, p.Topic)
	if p.QoS > QoS0 {
		dst = appendU16(dst, p.PacketID)
	}
	if v == V5 {
		dst = p.Properties.appendTo(dst, props)
	}
	return dst
}
