package packet

import (
	"errors"
	"fmt"
)

// Sentinel errors. Decoding failures are *Error values that wrap exactly one
// of them, so callers can test the class with errors.Is and take the reason
// code to send from the *Error.
var (
	// ErrMalformed reports bytes that cannot be parsed as the packet they
	// claim to be (reason code 0x81).
	ErrMalformed = errors.New("mqtt packet: malformed packet")
	// ErrProtocol reports a parsed packet whose content the specification
	// forbids (reason code 0x82).
	ErrProtocol = errors.New("mqtt packet: protocol error")
	// ErrUnsupportedVersion reports a CONNECT asking for a protocol level
	// this package does not speak (reason code 0x84; 3.1.1 return code 1).
	ErrUnsupportedVersion = errors.New("mqtt packet: unsupported protocol version")
	// ErrClientIDNotValid reports a CONNECT whose client identifier the
	// specification rejects (reason code 0x85; 3.1.1 return code 2).
	ErrClientIDNotValid = errors.New("mqtt packet: client identifier not valid")
	// ErrTopicAliasInvalid reports a Topic Alias property of 0 (reason code
	// 0x94).
	ErrTopicAliasInvalid = errors.New("mqtt packet: topic alias invalid")
	// ErrPacketTooLarge reports a packet over the maximum packet size, on
	// decoding or encoding (reason code 0x95).
	ErrPacketTooLarge = errors.New("mqtt packet: packet too large")
	// ErrPayloadFormatInvalid reports a payload marked as UTF-8 by its
	// Payload Format Indicator that is not valid UTF-8 (reason code 0x99).
	ErrPayloadFormatInvalid = errors.New("mqtt packet: payload format invalid")
	// ErrInvalid reports a packet value that cannot be encoded: a field out
	// of range, a string over 65535 bytes, a property the packet type does
	// not carry, or a value the protocol level cannot express.
	ErrInvalid = errors.New("mqtt packet: invalid packet value")
)

// Error is a decoding or encoding failure. Code is the reason code the
// receiver should report: in the DISCONNECT it sends (5.0), or in the
// CONNACK when the failure is in a CONNECT. Version is the protocol level
// the failure was judged under; for a CONNECT it is the level the CONNECT
// asked for, so a broker answering an unsupported level knows whether to
// use the 3.1.1 CONNACK format (levels below 5) or the 5.0 one.
type Error struct {
	// Code is the 5.0 reason code that describes the failure.
	Code ReasonCode
	// Type is the packet type involved, or 0 before the type byte was read.
	Type Type
	// Version is the protocol level in force (see the type comment).
	Version Version
	// Err is the sentinel this error wraps.
	Err error
	// Detail says which rule failed.
	Detail string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Type != 0 {
		return fmt.Sprintf("%v: %v: %s", e.Err, e.Type, e.Detail)
	}
	return fmt.Sprintf("%v: %s", e.Err, e.Detail)
}

// Unwrap returns the sentinel, for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

// ReasonCodeOf returns the reason code carried by a codec error anywhere in
// err's chain. It reports false for errors that did not come from this
// package's validation (connection errors), which call for closing the
// connection without a DISCONNECT.
func ReasonCodeOf(err error) (ReasonCode, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Code, true
	}
	return 0, false
}

// ConnackFor returns the CONNACK a server may send before closing the
// connection when decoding a CONNECT failed with err, and the level to
// encode it for. An unsupported level is answered in the 3.1.1 format for
// levels below 5 (return code 1) and in the 5.0 format above (0x84)
// [MQTT-3.1.2-2]; a 3.1.1 client identifier failure gets return code 2;
// any 5.0 failure gets its reason code. ok is false where the protocol has
// no CONNACK for the failure (other 3.1.1 failures, failures before the
// level was read, errors not about a CONNECT): close the connection
// without one.
func ConnackFor(err error) (ack *Connack, v Version, ok bool) {
	var e *Error
	if !errors.As(err, &e) || e.Type != TypeConnect {
		return nil, 0, false
	}
	switch {
	case errors.Is(e.Err, ErrUnsupportedVersion) && e.Version < V5:
		return &Connack{ReasonCode: UnsupportedProtocolVersion}, V311, true
	case errors.Is(e.Err, ErrUnsupportedVersion):
		return &Connack{ReasonCode: UnsupportedProtocolVersion}, V5, true
	case e.Version == V311 && e.Code == ClientIdentifierNotValid:
		return &Connack{ReasonCode: ClientIdentifierNotValid}, V311, true
	case e.Version == V5 && connackCodes.has(e.Code):
		return &Connack{ReasonCode: e.Code}, V5, true
	}
	return nil, 0, false
}

// codeOf maps a sentinel to the reason code it implies.
func codeOf(sentinel error) ReasonCode {
	//nolint:errorlint // sentinels only, compared as values
	switch sentinel {
	case ErrMalformed:
		return MalformedPacket
	case ErrProtocol:
		return ProtocolError
	case ErrUnsupportedVersion:
		return UnsupportedProtocolVersion
	case ErrClientIDNotValid:
		return ClientIdentifierNotValid
	case ErrTopicAliasInvalid:
		return TopicAliasInvalid
	case ErrPacketTooLarge:
		return PacketTooLarge
	case ErrPayloadFormatInvalid:
		return PayloadFormatInvalid
	default:
		return ImplementationSpecificError
	}
}

func newError(sentinel error, t Type, v Version, detail string) *Error {
	return &Error{Code: codeOf(sentinel), Type: t, Version: v, Err: sentinel, Detail: detail}
}

// invalid builds an encoding error.
func invalid(t Type, v Version, detail string) *Error {
	return newError(ErrInvalid, t, v, detail)
}
