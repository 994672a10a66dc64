package packet

import "strconv"

// Version is an MQTT protocol level, as carried in CONNECT.
type Version byte

// Protocol levels this package speaks.
const (
	// V311 is MQTT 3.1.1 (protocol level 4).
	V311 Version = 4
	// V5 is MQTT 5.0 (protocol level 5).
	V5 Version = 5
)

// Supported reports whether the codec encodes and decodes level v.
func (v Version) Supported() bool { return v == V311 || v == V5 }

// String returns "3.1.1", "5.0" or the bare level.
func (v Version) String() string {
	switch v {
	case V311:
		return "3.1.1"
	case V5:
		return "5.0"
	}
	return "level " + strconv.Itoa(int(v))
}

// Type is an MQTT control packet type, the high nibble of the first byte.
type Type byte

// Control packet types.
const (
	TypeConnect     Type = 1
	TypeConnack     Type = 2
	TypePublish     Type = 3
	TypePuback      Type = 4
	TypePubrec      Type = 5
	TypePubrel      Type = 6
	TypePubcomp     Type = 7
	TypeSubscribe   Type = 8
	TypeSuback      Type = 9
	TypeUnsubscribe Type = 10
	TypeUnsuback    Type = 11
	TypePingreq     Type = 12
	TypePingresp    Type = 13
	TypeDisconnect  Type = 14
	TypeAuth        Type = 15
)

var typeNames = [...]string{"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC",
	"PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ",
	"PINGRESP", "DISCONNECT", "AUTH"}

// String returns the specification's upper-case name of the type.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "type " + strconv.Itoa(int(t))
}

// QoS is a delivery quality of service level, 0 to 2.
type QoS byte

// QoS levels.
const (
	QoS0 QoS = 0 // at most once
	QoS1 QoS = 1 // at least once
	QoS2 QoS = 2 // exactly once
)

// RetainHandling is the 5.0 subscription option that says when retained
// messages are sent for a new subscription.
type RetainHandling byte

// Retain handling values; 3 is a protocol error on the wire.
const (
	// SendRetained sends retained messages on every subscribe.
	SendRetained RetainHandling = 0
	// SendRetainedIfNew sends them only if the subscription did not exist.
	SendRetainedIfNew RetainHandling = 1
	// DoNotSendRetained never sends them.
	DoNotSendRetained RetainHandling = 2
)

// Packet is one decoded or to-be-encoded MQTT control packet. The concrete
// types are pointers: *Connect, *Connack, *Publish, *Puback, *Pubrec,
// *Pubrel, *Pubcomp, *Subscribe, *Suback, *Unsubscribe, *Unsuback,
// *Pingreq, *Pingresp, *Disconnect and *Auth.
type Packet interface {
	// Type returns the control packet type.
	Type() Type
	// Size returns the number of bytes Append would add for level v, or
	// the error Append would return. It does not allocate.
	Size(v Version) (int, error)
	// Append appends the packet's encoding for level v to dst. On error
	// it returns dst unchanged and a *Error wrapping ErrInvalid.
	Append(dst []byte, v Version) ([]byte, error)
}

// UserProperty is one 5.0 User Property: a name/value pair that may repeat
// and whose order is kept.
type UserProperty struct {
	Key   string
	Value string
}

// Subscription is one topic filter of a SUBSCRIBE with its options. The
// 5.0-only options are dropped when encoding for 3.1.1.
type Subscription struct {
	// Filter is the topic filter, possibly "$share/{name}/{filter}".
	Filter string
	// QoS is the maximum QoS the subscriber accepts.
	QoS QoS
	// NoLocal asks the server not to send the client its own messages.
	NoLocal bool
	// RetainAsPublished keeps the RETAIN flag of forwarded messages.
	RetainAsPublished bool
	// RetainHandling says when retained messages are sent.
	RetainHandling RetainHandling
}

// MaxRemainingLength is the largest remaining length a four-byte variable
// byte integer can express (spec 1.5.5 / 2.2.3).
const MaxRemainingLength = 268_435_455

// MaxPacketSize is the size of the largest packet the protocol allows:
// a one-byte type, a four-byte remaining length, and the remaining bytes.
const MaxPacketSize = 1 + 4 + MaxRemainingLength

// MaxSubscriptionID is the largest Subscription Identifier.
const MaxSubscriptionID = MaxRemainingLength
