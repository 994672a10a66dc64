package message

import (
	"testing"
	"unsafe"
)

// TestDecodeEventAliases checks what a delivery relies on to copy
// nothing: a log event's message keeps its payload and correlation data
// in the event's value, capped so an append cannot write into it, and
// takes the event's id as its topic when they are equal.
func TestDecodeEventAliases(t *testing.T) {
	in := Message{Topic: "a/b", Payload: []byte("payload"), QoS: 1, CorrelationData: []byte{1, 2}}
	value, err := in.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	id := "a/b"
	var m Message
	if err := m.DecodeEvent(value, id); err != nil {
		t.Fatal(err)
	}
	if string(m.Payload) != "payload" || string(m.CorrelationData) != "\x01\x02" {
		t.Fatalf("decoded payload %q, correlation data %v", m.Payload, m.CorrelationData)
	}
	if !within(m.Payload, value) || !within(m.CorrelationData, value) {
		t.Fatal("the payload or correlation data was copied out of the event's value")
	}
	if cap(m.Payload) != len(m.Payload) {
		t.Fatalf("payload capacity %d past its length %d: an append would write into the value", cap(m.Payload), len(m.Payload))
	}
	if unsafe.StringData(m.Topic) != unsafe.StringData(id) {
		t.Fatal("the topic was copied rather than taken from the event's id")
	}

	var own Message
	if err := own.UnmarshalBinary(value); err != nil {
		t.Fatal(err)
	}
	if within(own.Payload, value) {
		t.Fatal("UnmarshalBinary aliases its input")
	}
}

// TestMarshalOwn checks that after MarshalOwn the message's payload is
// the one in its stored form, capped, so the buffer it came from can be
// reused, and that the form decodes to the same message.
func TestMarshalOwn(t *testing.T) {
	borrowed := []byte("payload")
	m := Message{Topic: "a/b", Payload: borrowed, QoS: 2, UserProps: []UserProperty{{Key: "k", Value: "v"}}}
	enc, err := m.MarshalOwn()
	if err != nil {
		t.Fatal(err)
	}
	copy(borrowed, "XXXXXXX") // the packet buffer, reused
	if string(m.Payload) != "payload" || !within(m.Payload, enc) {
		t.Fatalf("payload %q: not the stored form's copy", m.Payload)
	}
	if cap(m.Payload) != len(m.Payload) {
		t.Fatalf("payload capacity %d past its length %d", cap(m.Payload), len(m.Payload))
	}
	var back Message
	if err := back.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if string(back.Payload) != "payload" || back.Topic != "a/b" || len(back.UserProps) != 1 {
		t.Fatalf("decoded %+v", back)
	}
	empty := Message{Topic: "t"}
	if _, err := empty.MarshalOwn(); err != nil || len(empty.Payload) != 0 {
		t.Fatalf("empty payload: %q, %v", empty.Payload, err)
	}
}

// TestPayloadLen checks the payload length read without decoding, and 0
// for a stored form that does not decode.
func TestPayloadLen(t *testing.T) {
	m := Message{Topic: "t", Payload: make([]byte, 300), UserProps: []UserProperty{{Key: "k", Value: "v"}}}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if n := PayloadLen(b); n != 300 {
		t.Fatalf("PayloadLen = %d, want 300", n)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append([]byte{9}, b[1:]...)} {
		if n := PayloadLen(bad); n != 0 {
			t.Fatalf("PayloadLen of a corrupt form = %d, want 0", n)
		}
	}
}

// within reports whether s lies inside b's memory.
func within(s, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p < lo+uintptr(len(b))
}
