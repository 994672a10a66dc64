package packet

// The four publish acknowledgements share one layout: a packet identifier,
// then under 5.0 a reason code and properties, both omitted when the code is
// Success and there are no properties, and the properties alone omitted when
// there are none [MQTT-3.4.2-1 and the like].

func decodeAck(d *decoder, codes codeSet, id *uint16, rc *ReasonCode, props *Properties) {
	*id = d.packetID()
	if d.v == V5 && d.err == nil && d.remaining() > 0 {
		*rc = ReasonCode(d.u8("reason code"))
		if !codes.has(*rc) {
			d.fail(ErrProtocol, "reason code not allowed in this packet")
			return
		}
		if d.remaining() > 0 {
			props.decode(d, ctxAck)
		}
	}
	d.end()
}

// ackRemaining returns the remaining length and the property length.
func ackRemaining(t Type, v Version, codes codeSet, id uint16, rc ReasonCode, props *Properties) (int, int, error) {
	if id == 0 {
		return 0, 0, invalid(t, v, "packet identifier is 0")
	}
	switch v {
	case V311:
		return 2, 0, nil
	case V5:
		if !codes.has(rc) {
			return 0, 0, invalid(t, v, "reason code not allowed in this packet")
		}
		n, k, err := props.sizeWithLength(ctxAck, t, v)
		switch {
		case err != nil:
			return 0, 0, err
		case n > 0:
			return 3 + k, n, nil
		case rc != Success:
			return 3, 0, nil
		}
		return 2, 0, nil
	}
	return 0, 0, invalid(t, v, "unsupported protocol level")
}

func appendAck(dst []byte, t Type, flags byte, v Version, codes codeSet, id uint16, rc ReasonCode, props *Properties) ([]byte, error) {
	n, k, err := ackRemaining(t, v, codes, id, rc, props)
	if err != nil {
		return dst, err
	}
	if _, err := packetSize(t, v, n); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, t, flags, n)
	dst = appendU16(dst, id)
	if n >= 3 {
		dst = append(dst, byte(rc))
	}
	if n > 3 {
		dst = props.appendTo(dst, k)
	}
	return dst, nil
}

// Puback is a PUBACK packet.
type Puback struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// ReasonCode is the result (5.0; dropped under 3.1.1, decoded as
	// Success).
	ReasonCode ReasonCode
	// Properties are the PUBACK properties (5.0).
	Properties Properties
}

// Type returns TypePuback.
func (*Puback) Type() Type { return TypePuback }

// Size returns the encoded size of the packet for level v.
func (p *Puback) Size(v Version) (int, error) {
	n, _, err := ackRemaining(TypePuback, v, pubackCodes, p.PacketID, p.ReasonCode, &p.Properties)
	if err != nil {
		return 0, err
	}
	return packetSize(TypePuback, v, n)
}

// Append appends the packet encoded for level v.
func (p *Puback) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, TypePuback, 0, v, pubackCodes, p.PacketID, p.ReasonCode, &p.Properties)
}

// Pubrec is a PUBREC packet.
type Pubrec struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// ReasonCode is the result (5.0; dropped under 3.1.1, decoded as
	// Success).
	ReasonCode ReasonCode
	// Properties are the PUBREC properties (5.0).
	Properties Properties
}

// Type returns TypePubrec.
func (*Pubrec) Type() Type { return TypePubrec }

// Size returns the encoded size of the packet for level v.
func (p *Pubrec) Size(v Version) (int, error) {
	n, _, err := ackRemaining(TypePubrec, v, pubackCodes, p.PacketID, p.ReasonCode, &p.Properties)
	if err != nil {
		return 0, err
	}
	return packetSize(TypePubrec, v, n)
}

// Append appends the packet encoded for level v.
func (p *Pubrec) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, TypePubrec, 0, v, pubackCodes, p.PacketID, p.ReasonCode, &p.Properties)
}

// Pubrel is a PUBREL packet. Its fixed header flags are 0010.
type Pubrel struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// ReasonCode is the result (5.0; dropped under 3.1.1, decoded as
	// Success).
	ReasonCode ReasonCode
	// Properties are the PUBREL properties (5.0).
	Properties Properties
}

// Type returns TypePubrel.
func (*Pubrel) Type() Type { return TypePubrel }

// Size returns the encoded size of the packet for level v.
func (p *Pubrel) Size(v Version) (int, error) {
	n, _, err := ackRemaining(TypePubrel, v, pubrelCodes, p.PacketID, p.ReasonCode, &p.Properties)
	if err != nil {
		return 0, err
	}
	return packetSize(TypePubrel, v, n)
}

// Append appends the packet encoded for level v.
func (p *Pubrel) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, TypePubrel, 2, v, pubrelCodes, p.PacketID, p.ReasonCode, &p.Properties)
}

// Pubcomp is a PUBCOMP packet.
type Pubcomp struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// ReasonCode is the result (5.0; dropped under 3.1.1, decoded as
	// Success).
	ReasonCode ReasonCode
	// Properties are the PUBCOMP properties (5.0).
	Properties Properties
}

// Type returns TypePubcomp.
func (*Pubcomp) Type() Type { return TypePubcomp }

// Size returns the encoded size of the packet for level v.
func (p *Pubcomp) Size(v Version) (int, error) {
	n, _, err := ackRemaining(TypePubcomp, v, pubrelCodes, p.PacketID, p.ReasonCode, &p.Properties)
	if err != nil {
		return 0, err
	}
	return packetSize(TypePubcomp, v, n)
}

// Append appends the packet encoded for level v.
func (p *Pubcomp) Append(dst []byte, v Version) ([]byte, error) {
	return appendAck(dst, TypePubcomp, 0, v, pubrelCodes, p.PacketID, p.ReasonCode, &p.Properties)
}
