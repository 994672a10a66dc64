package packet

import "unicode/utf8"

// Connect is a CONNECT packet.
type Connect struct {
	// Version is the protocol level the packet carried when decoded.
	// Append ignores it and writes the level it is given.
	Version Version
	// CleanStart is Clean Start (5.0) or Clean Session (3.1.1).
	CleanStart bool
	// KeepAlive is the keep alive interval in seconds, 0 to disable.
	KeepAlive uint16
	// Properties are the CONNECT properties (5.0).
	Properties Properties
	// ClientID is the client identifier; empty asks the server to assign
	// one (5.0, or 3.1.1 with CleanStart).
	ClientID string
	// Will is the Will Message, nil when the Will Flag is 0.
	Will *Will
	// HasUsername is the User Name Flag; Username may be empty when set.
	HasUsername bool
	Username    string
	// HasPassword is the Password Flag; Password may be empty when set.
	// Under 3.1.1 a password requires a user name [MQTT-3.1.2-22].
	HasPassword bool
	Password    []byte
}

// Will is the Will Message of a CONNECT.
type Will struct {
	// Topic is the Will Topic, a valid topic name.
	Topic string
	// Payload is the Will Payload.
	Payload []byte
	// QoS is the Will QoS.
	QoS QoS
	// Retain is the Will Retain flag.
	Retain bool
	// Properties are the Will Properties (5.0).
	Properties Properties
}

// Type returns TypeConnect.
func (*Connect) Type() Type { return TypeConnect }

const (
	connectReserved   = 0x01
	connectClean      = 0x02
	connectWill       = 0x04
	connectWillRetain = 0x20
	connectPassword   = 0x40
	connectUsername   = 0x80
)

func decodeConnect(d *decoder, checkPayload bool) *Connect {
	name := d.raw("protocol name")
	level := d.u8("protocol level")
	if d.err != nil {
		return nil
	}
	// From here on the packet is judged by the level it asks for, and
	// errors tell the broker which CONNACK format to answer with.
	d.v = Version(level)
	switch {
	case string(name) == "MQTT" && d.v.Supported():
	case string(name) == "MQTT" || string(name) == "MQIsdp":
		d.fail(ErrUnsupportedVersion, "protocol level not supported")
		return nil
	default:
		d.fail(ErrProtocol, "protocol name is neither MQTT nor MQIsdp")
		return nil
	}
	c := &Connect{Version: d.v}
	flags := d.u8("connect flags")
	c.KeepAlive = d.u16("keep alive")
	if d.err != nil {
		return nil
	}
	willQoS := QoS(flags >> 3 & 3)
	switch {
	case flags&connectReserved != 0:
		d.fail(ErrMalformed, "reserved connect flag is set") // [MQTT-3.1.2-3]
	case willQoS == 3:
		d.fail(ErrMalformed, "will QoS is 3") // [MQTT-3.1.2-12]
	case flags&connectWill == 0 && (willQoS != 0 || flags&connectWillRetain != 0):
		d.fail(ErrMalformed, "will QoS or retain set without will flag") // [MQTT-3.1.2-11, -13]
	case d.v == V311 && flags&connectPassword != 0 && flags&connectUsername == 0:
		d.fail(ErrMalformed, "password flag set without user name flag") // [MQTT-3.1.2-22]
	}
	c.CleanStart = flags&connectClean != 0
	if d.v == V5 {
		c.Properties.decode(d, ctxConnect)
	}
	c.ClientID = d.str("client identifier")
	if flags&connectWill != 0 {
		w := &Will{QoS: willQoS, Retain: flags&connectWillRetain != 0}
		if d.v == V5 {
			w.Properties.decode(d, ctxWill)
		}
		w.Topic = d.str("will topic")
		w.Payload = d.bin("will payload")
		if d.err == nil && !ValidTopicName(w.Topic) {
			d.fail(ErrProtocol, "will topic is not a valid topic name")
		}
		if d.err == nil && checkPayload && w.Properties.PayloadFormat == 1 && !utf8.Valid(w.Payload) {
			d.fail(ErrPayloadFormatInvalid, "will payload is not UTF-8")
		}
		c.Will = w
	}
	if flags&connectUsername != 0 {
		c.HasUsername = true
		c.Username = d.str("user name")
	}
	if flags&connectPassword != 0 {
		c.HasPassword = true
		c.Password = d.bin("password")
	}
	d.end()
	if d.err == nil && d.v == V311 && c.ClientID == "" && !c.CleanStart {
		d.fail(ErrClientIDNotValid, "empty client identifier without clean session") // [MQTT-3.1.3-8]
	}
	if d.err != nil {
		return nil
	}
	return c
}

func (c *Connect) remaining(v Version) (int, error) {
	t := TypeConnect
	if !v.Supported() {
		return 0, invalid(t, v, "unsupported protocol level")
	}
	if v == V311 && c.HasPassword && !c.HasUsername {
		return 0, invalid(t, v, "password without user name")
	}
	if v == V311 && c.ClientID == "" && !c.CleanStart {
		return 0, invalid(t, v, "empty client identifier without clean session")
	}
	n := 6 + 1 + 1 + 2 // "MQTT", level, flags, keep alive
	if v == V5 {
		_, k, err := c.Properties.sizeWithLength(ctxConnect, t, v)
		if err != nil {
			return 0, err
		}
		n += k
	}
	k, err := strSize(len(c.ClientID), t, v, "client identifier")
	if err != nil {
		return 0, err
	}
	n += k
	if w := c.Will; w != nil {
		if w.QoS > QoS2 {
			return 0, invalid(t, v, "will QoS over 2")
		}
		if !ValidTopicName(w.Topic) {
			return 0, invalid(t, v, "will topic is not a valid topic name")
		}
		if v == V5 {
			_, k, err := w.Properties.sizeWithLength(ctxWill, t, v)
			if err != nil {
				return 0, err
			}
			n += k
		}
		if k, err = strSize(len(w.Topic), t, v, "will topic"); err != nil {
			return 0, err
		}
		n += k
		if k, err = strSize(len(w.Payload), t, v, "will payload"); err != nil {
			return 0, err
		}
		n += k
	}
	if c.HasUsername {
		if k, err = strSize(len(c.Username), t, v, "user name"); err != nil {
			return 0, err
		}
		n += k
	}
	if c.HasPassword {
		if k, err = strSize(len(c.Password), t, v, "password"); err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// Size returns the encoded size of the packet for level v.
func (c *Connect) Size(v Version) (int, error) {
	n, err := c.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeConnect, v, n)
}

// Append appends the packet encoded for level v, writing v as its
// protocol level.
func (c *Connect) Append(dst []byte, v Version) ([]byte, error) {
	n, err := c.remaining(v)
	if err != nil {
		return dst, err
	}
	size, err := packetSize(TypeConnect, v, n)
	if err != nil {
		return dst, err
	}
	dst = grow(dst, size)
	dst = appendHeader(dst, TypeConnect, 0, n)
	dst = appendStr(dst, "MQTT")
	var flags byte
	if c.CleanStart {
		flags |= connectClean
	}
	if w := c.Will; w != nil {
		flags |= connectWill | byte(w.QoS)<<3
		if w.Retain {
			flags |= connectWillRetain
		}
	}
	if c.HasUsername {
		flags |= connectUsername
	}
	if c.HasPassword {
		flags |= connectPassword
	}
	dst = append(dst, byte(v), flags)
	dst = appendU16(dst, c.KeepAlive)
	if v == V5 {
		k, _ := c.Properties.size(ctxConnect, TypeConnect, v)
		dst = c.Properties.appendTo(dst, k)
	}
	dst = appendStr(dst, c.ClientID)
	if w := c.Will; w != nil {
		if v == V5 {
			k, _ := w.Properties.size(ctxWill, TypeConnect, v)
			dst = w.Properties.appendTo(dst, k)
		}
		dst = appendStr(dst, w.Topic)
		dst = appendBin(dst, w.Payload)
	}
	if c.HasUsername {
		dst = appendStr(dst, c.Username)
	}
	if c.HasPassword {
		dst = appendBin(dst, c.Password)
	}
	return dst, nil
}

// Connack is a CONNACK packet. Under 3.1.1 ReasonCode is the 5.0 code
// equivalent to the return code (see ConnackReturnCode311); encoding a code
// without a 3.1.1 equivalent fails.
type Connack struct {
	// SessionPresent says the server resumed a session; it must be false
	// when ReasonCode is an error [MQTT-3.2.2-6].
	SessionPresent bool
	// ReasonCode is the result of the connection attempt.
	ReasonCode ReasonCode
	// Properties are the CONNACK properties (5.0).
	Properties Properties
}

// Type returns TypeConnack.
func (*Connack) Type() Type { return TypeConnack }

func decodeConnack(d *decoder) *Connack {
	c := &Connack{}
	flags := d.u8("acknowledge flags")
	code := d.u8("reason code")
	if d.err != nil {
		return nil
	}
	if flags&^1 != 0 {
		d.fail(ErrMalformed, "reserved acknowledge flags are set") // [MQTT-3.2.2-1]
		return nil
	}
	c.SessionPresent = flags == 1
	if d.v == V311 {
		if int(code) >= len(connackV311) {
			d.fail(ErrProtocol, "unknown return code")
			return nil
		}
		c.ReasonCode = connackV311[code]
	} else {
		c.ReasonCode = ReasonCode(code)
		if !connackCodes.has(c.ReasonCode) {
			d.fail(ErrProtocol, "reason code not allowed in CONNACK")
			return nil
		}
		c.Properties.decode(d, ctxConnack)
	}
	if d.err == nil && c.SessionPresent && c.ReasonCode != Success {
		d.fail(ErrProtocol, "session present with a failure code")
	}
	d.end()
	if d.err != nil {
		return nil
	}
	return c
}

func (c *Connack) remaining(v Version) (int, error) {
	t := TypeConnack
	if c.SessionPresent && c.ReasonCode != Success {
		return 0, invalid(t, v, "session present with a failure code")
	}
	switch v {
	case V311:
		if _, ok := ConnackReturnCode311(c.ReasonCode); !ok {
			return 0, invalid(t, v, "reason code has no 3.1.1 return code")
		}
		return 2, nil
	case V5:
		if !connackCodes.has(c.ReasonCode) {
			return 0, invalid(t, v, "reason code not allowed in CONNACK")
		}
		_, k, err := c.Properties.sizeWithLength(ctxConnack, t, v)
		return 2 + k, err
	}
	return 0, invalid(t, v, "unsupported protocol level")
}

// Size returns the encoded size of the packet for level v.
func (c *Connack) Size(v Version) (int, error) {
	n, err := c.remaining(v)
	if err != nil {
		return 0, err
	}
	return packetSize(TypeConnack, v, n)
}

// Append appends the packet encoded for level v.
func (c *Connack) Append(dst []byte, v Version) ([]byte, error) {
	n, err := c.remaining(v)
	if err != nil {
		return dst, err
	}
	if _, err := packetSize(TypeConnack, v, n); err != nil {
		return dst, err
	}
	dst = appendHeader(dst, TypeConnack, 0, n)
	var flags byte
	if c.SessionPresent {
		flags = 1
	}
	if v == V311 {
		code, _ := ConnackReturnCode311(c.ReasonCode)
		return append(dst, flags, code), nil
	}
	dst = append(dst, flags, byte(c.ReasonCode))
	k, _ := c.Properties.size(ctxConnack, TypeConnack, v)
	return c.Properties.appendTo(dst, k), nil
}
