package packet

// Pingreq is a PINGREQ packet.
type Pingreq struct{}

// Type returns TypePingreq.
func (*Pingreq) Type() Type { return TypePingreq }

// Size returns 2.
func (*Pingreq) Size(Version) (int, error) { return 2, nil }

// Append appends the two-byte packet.
func (*Pingreq) Append(dst []byte, _ Version) ([]byte, error) {
	return append(dst, byte(TypePingreq)<<4, 0), nil
}

// Pingresp is a PINGRESP packet.
type Pingresp struct{}

// Type returns TypePingresp.
func (*Pingresp) Type() Type { return TypePingresp }

// Size returns 2.
func (*Pingresp) Size(Version) (int, error) { return 2, nil }

// Append appends the two-byte packet.
func (*Pingresp) Append(dst []byte, _ Version) ([]byte, error) {
	return append(dst, byte(TypePingresp)<<4, 0), nil
}

// Disconnect is a DISCONNECT packet. Under 3.1.1 it has no body: the
// reason code and properties are dropped, and decode as normal
// disconnection.
type Disconnect struct {
	// ReasonCode says why the connection ends.
	ReasonCode ReasonCode
	// Properties are the DISCONNECT properties (5.0).
	Properties Properties
}

// Type returns TypeDisconnect.
func (*Disconnect) Type() Type { return TypeDisconnect }

func decodeDisconnect(d *decoder) *Disconnect {
	p := &Disconnect{}
	if d.v == V5 && d.remaining() > 0 {
		p.ReasonCode = ReasonCode(d.u8("reason code"))
		if !disconnectCodes.has(p.ReasonCode) {
			d.fail(ErrProtocol, "reason code not allowed in DISCONNECT")
		} else if d.remaining() > 0 {
			p.Properties.decode(d, ctxDisconnect)
		}
	}
	d.end()
	if d.err != nil {
		return nil
	}
	return p
}

// remaining keeps the reason code even when it is 0 and could be omitted:
// some 5.0 implementations cannot read a DISCONNECT with an empty body.
func (p *Disconnect) remaining(v Version) (int, int, error) {
	t := TypeDisconnect
	switch v {
	case V311:
		return 0, 0, nil
	case V5:
		if !disconnectCodes.has(p.ReasonCode) {
			return 0, 0, invalid(t, v, "reason code not allowed in DISCONNECT")
		}
		props, k, err := p.Properties.sizeWithLength(ctxDisconnect, t, v)
		if err != nil || props == 0 {
			return 1, 0, err
		}
		return 1 + k, props, nil
	}
	return 0, 0, invalid(t, v, "unsupported protocol level")
}

// Size returns the encoded size of the packet for level v.
func (p *Disconnect) Size(v Version) (int, error) {
	n, _, err := p.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeDisconnect, v, n)
}

// Append appends the packet encoded for level v.
func (p *Disconnect) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := p.remaining(v)
	if err != nil {
		return dst, err
	}
	if _, err := packetSize(TypeDisconnect, v, n); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, TypeDisconnect, 0, n)
	if n > 0 {
		dst = append(dst, byte(p.ReasonCode))
	}
	if n > 1 {
		dst = p.Properties.appendTo(dst, props)
	}
	return dst, nil
}

// Auth is an AUTH packet (5.0 only; encoding it for 3.1.1 fails and a 3.1.1
// Reader rejects it as malformed).
type Auth struct {
	// ReasonCode is Success, ContinueAuthentication or ReAuthenticate.
	ReasonCode ReasonCode
	// Properties are the AUTH properties.
	Properties Properties
}

// Type returns TypeAuth.
func (*Auth) Type() Type { return TypeAuth }

func decodeAuth(d *decoder) *Auth {
	p := &Auth{}
	if d.remaining() > 0 {
		p.ReasonCode = ReasonCode(d.u8("reason code"))
		if !authCodes.has(p.ReasonCode) {
			d.fail(ErrProtocol, "reason code not allowed in AUTH")
		} else if d.remaining() > 0 {
			p.Properties.decode(d, ctxAuth)
		}
	}
	d.end()
	if d.err != nil {
		return nil
	}
	return p
}

func (p *Auth) remaining(v Version) (int, int, error) {
	t := TypeAuth
	if v != V5 {
		return 0, 0, invalid(t, v, "AUTH exists only in MQTT 5.0")
	}
	if !authCodes.has(p.ReasonCode) {
		return 0, 0, invalid(t, v, "reason code not allowed in AUTH")
	}
	props, k, err := p.Properties.sizeWithLength(ctxAuth, t, v)
	if err != nil {
		return 0, 0, err
	}
	if props == 0 && p.ReasonCode == Success {
		return 0, 0, nil
	}
	return 1 + k, props, nil
}

// Size returns the encoded size of the packet for level v.
func (p *Auth) Size(v Version) (int, error) {
	n, _, err := p.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeAuth, v, n)
}

// Append appends the packet encoded for level v.
func (p *Auth) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := p.remaining(v)
	if err != nil {
		return dst, err
	}
	if _, err := packetSize(TypeAuth, v, n); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, TypeAuth, 0, n)
	if n > 0 {
		dst = append(dst, byte(p.ReasonCode))
		dst = p.Properties.appendTo(dst, props)
	}
	return dst, nil
}
