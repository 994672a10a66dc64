// Package message is the broker's application message and its stored
// form: what the log holds for every QoS 1 and 2 publication, the retained
// store for every retained one, and a session record for its will. The
// stored form is versioned; a decoder of this version rejects any other
// rather than misread it.
package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/wire"
)

// LogTable is the table of the message log: one entry per QoS 1 and 2
// publication, under its topic, in the order of the log.
const LogTable = "mqtt.msgs"

// ErrCorrupt reports a stored message that cannot be decoded.
var ErrCorrupt = errors.New("mqtt: corrupt stored message")

// UserProperty is one 5.0 user property; order and repeats are kept.
type UserProperty struct{ Key, Value string }

// Message is an application message as the broker stores and routes it:
// what a PUBLISH carried, plus who published it and when it expires.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	// From is the publishing client id (for no-local).
	From string
	// Expires is when the message expires (5.0 message expiry); zero means
	// never.
	Expires time.Time

	PayloadFormat   byte // 0 unspecified bytes, 1 UTF-8
	HasFormat       bool
	ContentType     string
	ResponseTopic   string
	CorrelationData []byte
	UserProps       []UserProperty
}

// Expired reports whether the message's expiry has passed at now.
func (m *Message) Expired(now time.Time) bool {
	return !m.Expires.IsZero() && !now.Before(m.Expires)
}

const messageVersion = 1

// Flags of the stored form.
const (
	flagRetain = 1 << iota
	flagHasFormat
)

// MarshalBinary encodes the message in the broker's stored form.
func (m *Message) MarshalBinary() ([]byte, error) {
	return m.AppendBinary(make([]byte, 0, m.binarySize()))
}

// MarshalOwn is MarshalBinary, after which m's payload is the copy in
// the stored form (capped at its length) rather than the slice m held: a
// caller encoding a message whose payload it borrowed (a packet buffer
// that is reused) keeps one copy, not two. Nothing may write to the
// returned bytes.
func (m *Message) MarshalOwn() ([]byte, error) {
	b, err := m.MarshalBinary()
	if err != nil {
		return nil, err
	}
	n := len(b)
	m.Payload = b[n-len(m.Payload) : n : n] // the stored form ends with the payload
	return b, nil
}

// BinarySize bounds the length of m's stored form, for a caller that
// appends it (AppendBinary) to a buffer it sizes.
func (m *Message) BinarySize() int { return m.binarySize() }

// binarySize bounds the length of m's stored form, so MarshalBinary
// allocates once.
func (m *Message) binarySize() int {
	const field = binary.MaxVarintLen32 // a length prefix
	n := 4 + 2*binary.MaxVarintLen64 +
		len(m.Topic) + len(m.From) + len(m.ContentType) + len(m.ResponseTopic) + len(m.CorrelationData) + len(m.Payload) + 6*field
	for _, p := range m.UserProps {
		n += len(p.Key) + len(p.Value) + 2*field
	}
	return n
}

// StoredQoS reads the QoS of a message from its stored form (see
// AppendBinary) without decoding the rest; ok is false for bytes that are
// not a stored message.
func StoredQoS(enc []byte) (qos byte, ok bool) {
	if len(enc) < 2 || enc[0] != messageVersion || enc[1] > 2 {
		return 0, false
	}
	return enc[1], true
}

// AppendBinary appends the stored form of m to b.
func (m *Message) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, messageVersion, m.QoS)
	var flags byte
	if m.Retain {
		flags |= flagRetain
	}
	if m.HasFormat {
		flags |= flagHasFormat
	}
	b = append(b, flags, m.PayloadFormat)
	var exp int64
	if !m.Expires.IsZero() {
		exp = m.Expires.UnixMilli()
	}
	b = binary.AppendVarint(b, exp)
	b = appendBytes(b, []byte(m.Topic))
	b = appendBytes(b, []byte(m.From))
	b = appendBytes(b, []byte(m.ContentType))
	b = appendBytes(b, []byte(m.ResponseTopic))
	b = appendBytes(b, m.CorrelationData)
	b = binary.AppendUvarint(b, uint64(len(m.UserProps)))
	for _, p := range m.UserProps {
		b = appendBytes(b, []byte(p.Key))
		b = appendBytes(b, []byte(p.Value))
	}
	return appendBytes(b, m.Payload), nil
}

// UnmarshalBinary decodes the stored form; the message does not alias b.
func (m *Message) UnmarshalBinary(b []byte) error {
	return m.decode(b, "", false)
}

// DecodeEvent decodes the stored form of a message event of the log: its
// payload and correlation data alias value, which no one modifies (see
// table.Event), and its topic is id, the event's id, when they are equal,
// so a delivery copies none of them.
func (m *Message) DecodeEvent(value []byte, id string) error {
	return m.decode(value, id, true)
}

// decode is UnmarshalBinary, aliasing b when shared is set and taking
// topic for the topic when they are equal.
func (m *Message) decode(b []byte, topic string, shared bool) error {
	clone := cloneOrNil
	if shared {
		clone = func(v []byte) []byte {
			if len(v) == 0 {
				return nil
			}
			return v[:len(v):len(v)] // an append must not write into b
		}
	}
	d := wire.Decoder{B: b, Corrupt: ErrCorrupt}
	if v := d.Byte("version"); v != messageVersion {
		return fmt.Errorf("%w: version %d", ErrCorrupt, v)
	}
	*m = Message{QoS: d.Byte("QoS")}
	flags := d.Byte("flags")
	m.Retain = flags&flagRetain != 0
	m.HasFormat = flags&flagHasFormat != 0
	m.PayloadFormat = d.Byte("payload format")
	if exp := d.Varint("expiry"); exp != 0 {
		m.Expires = time.UnixMilli(exp)
	}
	if tb := d.Bytes("topic"); string(tb) == topic {
		m.Topic = topic
	} else {
		m.Topic = string(tb)
	}
	m.From = string(d.Bytes("sender"))
	m.ContentType = string(d.Bytes("content type"))
	m.ResponseTopic = string(d.Bytes("response topic"))
	m.CorrelationData = clone(d.Bytes("correlation data"))
	// Bounded by the form's length: a corrupt count allocates nothing.
	n := d.Uvarint(uint64(len(b)), "user property count")
	for i := uint64(0); i < n; i++ {
		m.UserProps = append(m.UserProps, UserProperty{Key: string(d.Bytes("user property")), Value: string(d.Bytes("user property"))})
	}
	m.Payload = clone(d.Bytes("payload"))
	if d.Err != nil || len(d.B) != 0 || m.QoS > 2 {
		return fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return nil
}

// PayloadLen returns the length of the payload of a message in its
// stored form without decoding the rest; 0 for one that does not decode
// (delivery skips it too).
func PayloadLen(b []byte) int {
	d := wire.Decoder{B: b, Corrupt: ErrCorrupt}
	if d.Byte("version") != messageVersion {
		return 0
	}
	d.Byte("QoS")
	d.Byte("flags")
	d.Byte("payload format")
	d.Varint("expiry")
	for range 5 { // topic, from, content type, response topic, correlation data
		d.Bytes("field")
	}
	n := d.Uvarint(uint64(len(b)), "user property count")
	for i := uint64(0); i < 2*n; i++ {
		d.Bytes("user property")
	}
	p := d.Bytes("payload")
	if d.Err != nil || len(d.B) != 0 {
		return 0
	}
	return len(p)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
