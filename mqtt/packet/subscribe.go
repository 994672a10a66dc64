package packet

// Subscribe is a SUBSCRIBE packet. Its fixed header flags are 0010.
type Subscribe struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// Properties are the SUBSCRIBE properties (5.0): at most one
	// Subscription Identifier, and User Properties.
	Properties Properties
	// Subscriptions holds at least one topic filter [MQTT-3.8.3-2].
	Subscriptions []Subscription
}

// Type returns TypeSubscribe.
func (*Subscribe) Type() Type { return TypeSubscribe }

const (
	optQoS               = 0x03
	optNoLocal           = 0x04
	optRetainAsPublished = 0x08
	optRetainHandling    = 0x30
	optReserved5         = 0xC0
	optReserved311       = 0xFC
)

// decodeFilter reads a topic filter and checks wildcard placement. A
// misplaced wildcard is reported as a protocol error: the packet parsed,
// its content is forbidden.
func decodeFilter(d *decoder) string {
	f := d.str("topic filter")
	if d.err == nil && !validFilter(f) {
		d.fail(ErrProtocol, "invalid topic filter") // [MQTT-4.7.1-1, -2], [MQTT-4.8.2-1, -2]
	}
	return f
}

// countEntries counts the length-prefixed strings in b, each followed by
// extra bytes, so that the list decoded from them is allocated once.
func countEntries(b []byte, extra int) int {
	n := 0
	for i := 0; i+2 <= len(b); n++ {
		i += 2 + (int(b[i])<<8 | int(b[i+1])) + extra
	}
	return n
}

func isShared(f string) bool { return len(f) > 7 && f[:7] == "$share/" }

func decodeSubscribe(d *decoder) *Subscribe {
	s := &Subscribe{PacketID: d.packetID()}
	if d.v == V5 {
		s.Properties.decode(d, ctxSubscribe)
	}
	if d.err == nil {
		s.Subscriptions = make([]Subscription, 0, countEntries(d.buf[d.off:], 1))
	}
	for d.err == nil && d.remaining() > 0 {
		sub := Subscription{Filter: decodeFilter(d)}
		opts := d.u8("subscription options")
		if d.err != nil {
			break
		}
		sub.QoS = QoS(opts & optQoS)
		if sub.QoS == 3 {
			d.fail(ErrMalformed, "subscription QoS is 3") // [MQTT-3.8.3-4 in 3.1.1]
			break
		}
		if d.v == V311 {
			if opts&optReserved311 != 0 {
				d.fail(ErrMalformed, "reserved subscription option bits are set") // [MQTT-3.8.3-4 in 3.1.1]
				break
			}
		} else {
			if opts&optReserved5 != 0 {
				d.fail(ErrMalformed, "reserved subscription option bits are set") // [MQTT-3.8.3-5]
				break
			}
			sub.NoLocal = opts&optNoLocal != 0
			sub.RetainAsPublished = opts&optRetainAsPublished != 0
			sub.RetainHandling = RetainHandling(opts & optRetainHandling >> 4)
			if sub.RetainHandling == 3 {
				d.fail(ErrProtocol, "retain handling is 3")
				break
			}
			if sub.NoLocal && isShared(sub.Filter) {
				d.fail(ErrProtocol, "no local on a shared subscription") // [MQTT-3.8.3-4]
				break
			}
		}
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	if d.err == nil && len(s.Subscriptions) == 0 {
		d.fail(ErrProtocol, "no topic filter") // [MQTT-3.8.3-2]
	}
	d.end()
	if d.err != nil {
		return nil
	}
	return s
}

func (s *Subscribe) remaining(v Version) (int, int, error) {
	t := TypeSubscribe
	if !v.Supported() {
		return 0, 0, invalid(t, v, "unsupported protocol level")
	}
	if s.PacketID == 0 {
		return 0, 0, invalid(t, v, "packet identifier is 0")
	}
	if len(s.Subscriptions) == 0 {
		return 0, 0, invalid(t, v, "no topic filter")
	}
	n, props := 2, 0
	if v == V5 {
		var k int
		var err error
		props, k, err = s.Properties.sizeWithLength(ctxSubscribe, t, v)
		if err != nil {
			return 0, 0, err
		}
		n += k
	}
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		if sub.QoS > QoS2 || sub.RetainHandling > DoNotSendRetained {
			return 0, 0, invalid(t, v, "subscription option out of range")
		}
		k, err := strSize(len(sub.Filter), t, v, "topic filter")
		if err != nil {
			return 0, 0, err
		}
		n += k + 1
	}
	return n, props, nil
}

// Size returns the encoded size of the packet for level v.
func (s *Subscribe) Size(v Version) (int, error) {
	n, _, err := s.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeSubscribe, v, n)
}

// Append appends the packet encoded for level v; the 5.0 subscription
// options are dropped under 3.1.1.
func (s *Subscribe) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := s.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypeSubscribe, v, n)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = appendHeader(dst, TypeSubscribe, 2, n)
	dst = appendU16(dst, s.PacketID)
	if v == V5 {
		dst = s.Properties.appendTo(dst, props)
	}
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		dst = appendStr(dst, sub.Filter)
		opts := byte(sub.QoS)
		if v == V5 {
			if sub.NoLocal {
				opts |= optNoLocal
			}
			if sub.RetainAsPublished {
				opts |= optRetainAsPublished
			}
			opts |= byte(sub.RetainHandling) << 4
		}
		dst = append(dst, opts)
	}
	return dst, nil
}

// Suback is a SUBACK packet. Under 3.1.1 any failure code is sent as 0x80
// and decoded as UnspecifiedError.
type Suback struct {
	// PacketID is the identifier of the SUBSCRIBE acknowledged.
	PacketID uint16
	// Properties are the SUBACK properties (5.0).
	Properties Properties
	// ReasonCodes holds one code per topic filter, in order.
	ReasonCodes []ReasonCode
}

// Type returns TypeSuback.
func (*Suback) Type() Type { return TypeSuback }

func decodeCodes(d *decoder, codes codeSet) []ReasonCode {
	if d.err != nil {
		return nil
	}
	if d.remaining() == 0 {
		d.fail(ErrProtocol, "no reason code")
		return nil
	}
	out := make([]ReasonCode, d.remaining())
	for i, b := range d.buf[d.off:] {
		out[i] = ReasonCode(b)
		if !codes.has(out[i]) {
			d.fail(ErrProtocol, "reason code not allowed in this packet")
			return nil
		}
	}
	d.off = len(d.buf)
	return out
}

func decodeSuback(d *decoder) *Suback {
	s := &Suback{PacketID: d.packetID()}
	codes := subackCodes311
	if d.v == V5 {
		codes = subackCodes
		s.Properties.decode(d, ctxSuback)
	}
	s.ReasonCodes = decodeCodes(d, codes)
	if d.err != nil {
		return nil
	}
	return s
}

func (s *Suback) remaining(v Version) (int, int, error) {
	t := TypeSuback
	if s.PacketID == 0 {
		return 0, 0, invalid(t, v, "packet identifier is 0")
	}
	if len(s.ReasonCodes) == 0 {
		return 0, 0, invalid(t, v, "no reason code")
	}
	switch v {
	case V311:
		for _, c := range s.ReasonCodes {
			if !c.IsError() && c > GrantedQoS2 {
				return 0, 0, invalid(t, v, "reason code not allowed in SUBACK")
			}
		}
		return 2 + len(s.ReasonCodes), 0, nil
	case V5:
		for _, c := range s.ReasonCodes {
			if !subackCodes.has(c) {
				return 0, 0, invalid(t, v, "reason code not allowed in SUBACK")
			}
		}
		props, k, err := s.Properties.sizeWithLength(ctxSuback, t, v)
		return 2 + k + len(s.ReasonCodes), props, err
	}
	return 0, 0, invalid(t, v, "unsupported protocol level")
}

// Size returns the encoded size of the packet for level v.
func (s *Suback) Size(v Version) (int, error) {
	n, _, err := s.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeSuback, v, n)
}

// Append appends the packet encoded for level v.
func (s *Suback) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := s.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypeSuback, v, n)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = appendHeader(dst, TypeSuback, 0, n)
	dst = appendU16(dst, s.PacketID)
	if v == V5 {
		dst = s.Properties.appendTo(dst, props)
	}
	for _, c := range s.ReasonCodes {
		if v == V311 && c.IsError() {
			c = UnspecifiedError
		}
		dst = append(dst, byte(c))
	}
	return dst, nil
}

// Unsubscribe is an UNSUBSCRIBE packet. Its fixed header flags are 0010.
type Unsubscribe struct {
	// PacketID is the identifier of the exchange, never 0.
	PacketID uint16
	// Properties are the UNSUBSCRIBE properties (5.0).
	Properties Properties
	// Filters holds at least one topic filter [MQTT-3.10.3-2].
	Filters []string
}

// Type returns TypeUnsubscribe.
func (*Unsubscribe) Type() Type { return TypeUnsubscribe }

func decodeUnsubscribe(d *decoder) *Unsubscribe {
	u := &Unsubscribe{PacketID: d.packetID()}
	if d.v == V5 {
		u.Properties.decode(d, ctxUnsubscribe)
	}
	if d.err == nil {
		u.Filters = make([]string, 0, countEntries(d.buf[d.off:], 0))
	}
	for d.err == nil && d.remaining() > 0 {
		f := decodeFilter(d)
		if d.err == nil {
			u.Filters = append(u.Filters, f)
		}
	}
	if d.err == nil && len(u.Filters) == 0 {
		d.fail(ErrProtocol, "no topic filter") // [MQTT-3.10.3-2]
	}
	if d.err != nil {
		return nil
	}
	return u
}

func (u *Unsubscribe) remaining(v Version) (int, int, error) {
	t := TypeUnsubscribe
	if !v.Supported() {
		return 0, 0, invalid(t, v, "unsupported protocol level")
	}
	if u.PacketID == 0 {
		return 0, 0, invalid(t, v, "packet identifier is 0")
	}
	if len(u.Filters) == 0 {
		return 0, 0, invalid(t, v, "no topic filter")
	}
	n, props := 2, 0
	if v == V5 {
		var k int
		var err error
		props, k, err = u.Properties.sizeWithLength(ctxUnsubscribe, t, v)
		if err != nil {
			return 0, 0, err
		}
		n += k
	}
	for _, f := range u.Filters {
		k, err := strSize(len(f), t, v, "topic filter")
		if err != nil {
			return 0, 0, err
		}
		n += k
	}
	return n, props, nil
}

// Size returns the encoded size of the packet for level v.
func (u *Unsubscribe) Size(v Version) (int, error) {
	n, _, err := u.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeUnsubscribe, v, n)
}

// Append appends the packet encoded for level v.
func (u *Unsubscribe) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := u.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypeUnsubscribe, v, n)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = appendHeader(dst, TypeUnsubscribe, 2, n)
	dst = appendU16(dst, u.PacketID)
	if v == V5 {
		dst = u.Properties.appendTo(dst, props)
	}
	for _, f := range u.Filters {
		dst = appendStr(dst, f)
	}
	return dst, nil
}

// Unsuback is an UNSUBACK packet. Under 3.1.1 it carries only the packet
// identifier: ReasonCodes and Properties are dropped, and decode empty.
type Unsuback struct {
	// PacketID is the identifier of the UNSUBSCRIBE acknowledged.
	PacketID uint16
	// Properties are the UNSUBACK properties (5.0).
	Properties Properties
	// ReasonCodes holds one code per topic filter, in order (5.0).
	ReasonCodes []ReasonCode
}

// Type returns TypeUnsuback.
func (*Unsuback) Type() Type { return TypeUnsuback }

func decodeUnsuback(d *decoder) *Unsuback {
	u := &Unsuback{PacketID: d.packetID()}
	if d.v == V5 {
		u.Properties.decode(d, ctxUnsuback)
		u.ReasonCodes = decodeCodes(d, unsubackCodes)
	}
	d.end()
	if d.err != nil {
		return nil
	}
	return u
}

func (u *Unsuback) remaining(v Version) (int, int, error) {
	t := TypeUnsuback
	if u.PacketID == 0 {
		return 0, 0, invalid(t, v, "packet identifier is 0")
	}
	switch v {
	case V311:
		return 2, 0, nil
	case V5:
		if len(u.ReasonCodes) == 0 {
			return 0, 0, invalid(t, v, "no reason code")
		}
		for _, c := range u.ReasonCodes {
			if !unsubackCodes.has(c) {
				return 0, 0, invalid(t, v, "reason code not allowed in UNSUBACK")
			}
		}
		props, k, err := u.Properties.sizeWithLength(ctxUnsuback, t, v)
		return 2 + k + len(u.ReasonCodes), props, err
	}
	return 0, 0, invalid(t, v, "unsupported protocol level")
}

// Size returns the encoded size of the packet for level v.
func (u *Unsuback) Size(v Version) (int, error) {
	n, _, err := u.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeUnsuback, v, n)
}

// Append appends the packet encoded for level v.
func (u *Unsuback) Append(dst []byte, v Version) ([]byte, error) {
	n, props, err := u.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypeUnsuback, v, n)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = appendHeader(dst, TypeUnsuback, 0, n)
	dst = appendU16(dst, u.PacketID)
	if v == V5 {
		dst = u.Properties.appendTo(dst, props)
		for _, c := range u.ReasonCodes {
			dst = append(dst, byte(c))
		}
	}
	return dst, nil
}
