package packet

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// raw builds a packet from its first byte and body parts, computing the
// remaining length.
func raw(first byte, parts ...[]byte) []byte {
	body := bytes.Join(parts, nil)
	return append(appendVBI([]byte{first}, len(body)), body...)
}

// s encodes a UTF-8 string field (two-byte length, then the bytes).
func s(v string) []byte { return appendStr(nil, v) }

// b is shorthand for literal bytes.
func b(v ...byte) []byte { return v }

// connectHead is the variable header of a CONNECT up to keep alive.
func connectHead(name string, level, flags byte) []byte {
	return append(append(s(name), level, flags), 0, 60)
}

type malformedCase struct {
	name     string
	v        Version // the Reader's level (0: before CONNECT)
	in       []byte
	sentinel error
	code     ReasonCode
}

func malformedCases() []malformedCase {
	noProps := b(0)
	return []malformedCase{
		// Fixed header.
		{"type 0", V5, b(0x00, 0), ErrMalformed, MalformedPacket},
		{"auth in 3.1.1", V311, b(0xF0, 0), ErrMalformed, MalformedPacket},
		{"first packet not connect", 0, b(0xC0, 0), ErrProtocol, ProtocolError},
		{"pubrel flags 0000", V5, raw(0x60, b(0, 1)), ErrMalformed, MalformedPacket},
		{"subscribe flags 0000", V311, raw(0x80, b(0, 1), s("a"), b(0)), ErrMalformed, MalformedPacket},
		{"unsubscribe flags 0011", V311, raw(0xA3, b(0, 1), s("a")), ErrMalformed, MalformedPacket},
		{"pingreq flags 0001", V5, b(0xC1, 0), ErrMalformed, MalformedPacket},
		{"puback flags 0010", V5, raw(0x42, b(0, 1)), ErrMalformed, MalformedPacket},
		{"remaining length 5 bytes", V5, b(0x30, 0xff, 0xff, 0xff, 0xff, 0x7f), ErrMalformed, MalformedPacket},
		{"remaining length not minimal", V5, b(0xC0, 0x80, 0x00), ErrMalformed, MalformedPacket},
		{"property length not minimal", V5, raw(0x40, b(0, 1, 0), b(0x80, 0x00)), ErrMalformed, MalformedPacket},

		// PUBLISH.
		{"qos 3", V5, raw(0x36, s("t"), b(0, 1), noProps), ErrMalformed, MalformedPacket},
		{"dup with qos 0", V311, raw(0x38, s("t")), ErrProtocol, ProtocolError},
		{"topic with #", V311, raw(0x30, s("a/#")), ErrProtocol, ProtocolError},
		{"topic with +", V5, raw(0x30, s("+"), noProps), ErrProtocol, ProtocolError},
		{"topic overlong NUL", V311, raw(0x30, b(0, 2, 0xC0, 0x80)), ErrMalformed, MalformedPacket},
		{"topic surrogate", V311, raw(0x30, b(0, 3, 0xED, 0xA0, 0x80)), ErrMalformed, MalformedPacket},
		{"topic NUL", V311, raw(0x30, b(0, 3, 'a', 0, 'b')), ErrMalformed, MalformedPacket},
		{"topic truncated utf-8", V311, raw(0x30, b(0, 2, 'a', 0xE2)), ErrMalformed, MalformedPacket},
		{"empty topic 3.1.1", V311, raw(0x30, s("")), ErrProtocol, ProtocolError},
		{"empty topic without alias", V5, raw(0x30, s(""), noProps), ErrProtocol, ProtocolError},
		{"packet id 0", V311, raw(0x32, s("t"), b(0, 0)), ErrProtocol, ProtocolError},
		{"topic length past end", V311, raw(0x30, b(0, 5, 't')), ErrMalformed, MalformedPacket},
		{"missing packet id", V311, raw(0x32, s("t"), b(1)), ErrMalformed, MalformedPacket},
		{"payload format 2", V5, raw(0x30, s("t"), b(2, 0x01, 2)), ErrProtocol, ProtocolError},
		{"topic alias 0", V5, raw(0x30, s("t"), b(3, 0x23, 0, 0)), ErrTopicAliasInvalid, TopicAliasInvalid},
		{"subscription id 0", V5, raw(0x30, s("t"), b(2, 0x0B, 0)), ErrProtocol, ProtocolError},
		{"subscription id 5 bytes", V5, raw(0x30, s("t"), b(6, 0x0B, 0x80, 0x80, 0x80, 0x80, 0x01)), ErrMalformed, MalformedPacket},
		{"payload not utf-8", V5, raw(0x30, s("t"), b(2, 0x01, 1), b(0xff)), ErrPayloadFormatInvalid, PayloadFormatInvalid},
		{"response topic wildcard", V5, raw(0x30, s("t"), b(6, 0x08), s("r/#")), ErrProtocol, ProtocolError},
		{"message expiry repeated", V5, raw(0x30, s("t"), b(10, 0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2)), ErrProtocol, ProtocolError},
		{"content type not utf-8", V5, raw(0x30, s("t"), b(4, 0x03, 0, 1, 0xff)), ErrMalformed, MalformedPacket},
		{"user property value NUL", V5, raw(0x30, s("t"), b(7, 0x26, 0, 1, 'k', 0, 1, 0)), ErrMalformed, MalformedPacket},

		// Properties in general.
		{"unknown property", V5, raw(0x40, b(0, 1, 0x00, 1, 0x7F)), ErrMalformed, MalformedPacket},
		{"multi-byte property id", V5, raw(0x40, b(0, 1, 0x00, 2, 0x81, 0x01)), ErrMalformed, MalformedPacket},
		{"property not allowed in puback", V5, raw(0x40, b(0, 1, 0x00, 3, 0x23, 0, 1)), ErrMalformed, MalformedPacket},
		{"reason string repeated", V5, raw(0x40, b(0, 1, 0x00, 6, 0x1F, 0, 0, 0x1F, 0, 0)), ErrProtocol, ProtocolError},
		{"property length past end", V5, raw(0x40, b(0, 1, 0x00, 5, 0x1F)), ErrMalformed, MalformedPacket},
		{"property value truncated", V5, raw(0x40, b(0, 1, 0x00, 2, 0x1F, 0)), ErrMalformed, MalformedPacket},

		// Acknowledgements.
		{"puback id 0", V5, raw(0x40, b(0, 0)), ErrProtocol, ProtocolError},
		{"puback 3.1.1 trailing byte", V311, raw(0x40, b(0, 1, 0)), ErrMalformed, MalformedPacket},
		{"puback short", V311, raw(0x40, b(0)), ErrMalformed, MalformedPacket},
		{"puback code of pubrel", V5, raw(0x40, b(0, 1, 0x92)), ErrProtocol, ProtocolError},
		{"pubcomp code of puback", V5, raw(0x70, b(0, 1, 0x10)), ErrProtocol, ProtocolError},
		{"pubrec trailing after props", V5, raw(0x50, b(0, 1, 0, 0, 9)), ErrMalformed, MalformedPacket},

		// SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK.
		{"subscribe no filter", V311, raw(0x82, b(0, 1)), ErrProtocol, ProtocolError},
		{"subscribe no filter 5.0", V5, raw(0x82, b(0, 1), noProps), ErrProtocol, ProtocolError},
		{"subscribe id 0", V311, raw(0x82, b(0, 0), s("a"), b(0)), ErrProtocol, ProtocolError},
		{"subscribe missing options", V311, raw(0x82, b(0, 1), s("a")), ErrMalformed, MalformedPacket},
		{"subscribe reserved bits 3.1.1", V311, raw(0x82, b(0, 1), s("a"), b(0x04)), ErrMalformed, MalformedPacket},
		{"subscribe reserved bits 5.0", V5, raw(0x82, b(0, 1), noProps, s("a"), b(0x40)), ErrMalformed, MalformedPacket},
		{"subscribe qos 3", V5, raw(0x82, b(0, 1), noProps, s("a"), b(0x03)), ErrMalformed, MalformedPacket},
		{"retain handling 3", V5, raw(0x82, b(0, 1), noProps, s("a"), b(0x30)), ErrProtocol, ProtocolError},
		{"no local on shared", V5, raw(0x82, b(0, 1), noProps, s("$share/g/a"), b(0x04)), ErrProtocol, ProtocolError},
		{"two subscription ids", V5, raw(0x82, b(0, 1), b(4, 0x0B, 1, 0x0B, 2), s("a"), b(0)), ErrProtocol, ProtocolError},
		{"subscription id in unsubscribe", V5, raw(0xA2, b(0, 1), b(2, 0x0B, 1), s("a")), ErrMalformed, MalformedPacket},
		{"filter # not last", V311, raw(0x82, b(0, 1), s("a/#/b"), b(0)), ErrProtocol, ProtocolError},
		{"filter # in level", V311, raw(0x82, b(0, 1), s("a#"), b(0)), ErrProtocol, ProtocolError},
		{"filter + in level", V311, raw(0x82, b(0, 1), s("a/b+"), b(0)), ErrProtocol, ProtocolError},
		{"filter +x", V311, raw(0x82, b(0, 1), s("+x"), b(0)), ErrProtocol, ProtocolError},
		{"filter empty", V311, raw(0x82, b(0, 1), s(""), b(0)), ErrProtocol, ProtocolError},
		{"filter shared empty name", V5, raw(0x82, b(0, 1), noProps, s("$share//a"), b(0)), ErrProtocol, ProtocolError},
		{"filter shared no filter", V5, raw(0x82, b(0, 1), noProps, s("$share/g"), b(0)), ErrProtocol, ProtocolError},
		{"filter shared empty filter", V5, raw(0x82, b(0, 1), noProps, s("$share/g/"), b(0)), ErrProtocol, ProtocolError},
		{"filter shared wildcard name", V5, raw(0x82, b(0, 1), noProps, s("$share/g+/a"), b(0)), ErrProtocol, ProtocolError},
		{"filter not utf-8", V311, raw(0x82, b(0, 1), b(0, 1, 0x80), b(0)), ErrMalformed, MalformedPacket},
		{"unsubscribe no filter", V311, raw(0xA2, b(0, 1)), ErrProtocol, ProtocolError},
		{"unsubscribe bad filter", V5, raw(0xA2, b(0, 1), noProps, s("#/a")), ErrProtocol, ProtocolError},
		{"suback no codes", V5, raw(0x90, b(0, 1), noProps), ErrProtocol, ProtocolError},
		{"suback code 3", V5, raw(0x90, b(0, 1), noProps, b(3)), ErrProtocol, ProtocolError},
		{"suback 3.1.1 code 0x87", V311, raw(0x90, b(0, 1), b(0x87)), ErrProtocol, ProtocolError},
		{"unsuback 3.1.1 trailing", V311, raw(0xB0, b(0, 1, 0)), ErrMalformed, MalformedPacket},
		{"unsuback no codes", V5, raw(0xB0, b(0, 1), noProps), ErrProtocol, ProtocolError},
		{"unsuback code", V5, raw(0xB0, b(0, 1), noProps, b(0x01)), ErrProtocol, ProtocolError},

		// PINGREQ, PINGRESP, DISCONNECT, AUTH.
		{"pingreq with body", V311, raw(0xC0, b(0)), ErrMalformed, MalformedPacket},
		{"pingresp with body", V5, raw(0xD0, b(0)), ErrMalformed, MalformedPacket},
		{"disconnect 3.1.1 body", V311, raw(0xE0, b(0)), ErrMalformed, MalformedPacket},
		{"disconnect code", V5, raw(0xE0, b(0x01)), ErrProtocol, ProtocolError},
		{"disconnect property", V5, raw(0xE0, b(0x00, 2, 0x01, 1)), ErrMalformed, MalformedPacket},
		{"auth code", V5, raw(0xF0, b(0x05)), ErrProtocol, ProtocolError},
		{"auth flags", V5, raw(0xF1), ErrMalformed, MalformedPacket},
		{"auth data without method", V5, raw(0xF0, b(0x18, 3, 0x16, 0, 0)), ErrProtocol, ProtocolError},

		// CONNECT.
		{"protocol name", 0, raw(0x10, connectHead("MQTX", 4, 2), s("c")), ErrProtocol, ProtocolError},
		{"level 3", 0, raw(0x10, connectHead("MQIsdp", 3, 2), s("c")), ErrUnsupportedVersion, UnsupportedProtocolVersion},
		{"level 6", 0, raw(0x10, connectHead("MQTT", 6, 2), noProps, s("c")), ErrUnsupportedVersion, UnsupportedProtocolVersion},
		{"reserved flag", 0, raw(0x10, connectHead("MQTT", 4, 3), s("c")), ErrMalformed, MalformedPacket},
		{"will qos 3", 0, raw(0x10, connectHead("MQTT", 4, 0x1E), s("c"), s("t"), s("m")), ErrMalformed, MalformedPacket},
		{"will qos without will", 0, raw(0x10, connectHead("MQTT", 4, 0x0A), s("c")), ErrMalformed, MalformedPacket},
		{"will retain without will", 0, raw(0x10, connectHead("MQTT", 5, 0x22), noProps, s("c")), ErrMalformed, MalformedPacket},
		{"password without user 3.1.1", 0, raw(0x10, connectHead("MQTT", 4, 0x42), s("c"), s("p")), ErrMalformed, MalformedPacket},
		{"empty id without clean 3.1.1", 0, raw(0x10, connectHead("MQTT", 4, 0), s("")), ErrClientIDNotValid, ClientIdentifierNotValid},
		{"will topic wildcard", 0, raw(0x10, connectHead("MQTT", 4, 0x06), s("c"), s("a/+"), s("m")), ErrProtocol, ProtocolError},
		{"will topic empty", 0, raw(0x10, connectHead("MQTT", 5, 0x06), noProps, s("c"), noProps, s(""), s("m")), ErrProtocol, ProtocolError},
		{"will property not allowed", 0, raw(0x10, connectHead("MQTT", 5, 0x06), noProps, s("c"), b(5, 0x11, 0, 0, 0, 1), s("t"), s("m")), ErrMalformed, MalformedPacket},
		{"will payload not utf-8", 0, raw(0x10, connectHead("MQTT", 5, 0x06), noProps, s("c"), b(2, 0x01, 1), s("t"), b(0, 1, 0xff)), ErrPayloadFormatInvalid, PayloadFormatInvalid},
		{"connect receive maximum 0", 0, raw(0x10, connectHead("MQTT", 5, 2), b(3, 0x21, 0, 0), s("c")), ErrProtocol, ProtocolError},
		{"connect maximum packet size 0", 0, raw(0x10, connectHead("MQTT", 5, 2), b(5, 0x27, 0, 0, 0, 0), s("c")), ErrProtocol, ProtocolError},
		{"connect request problem info 2", 0, raw(0x10, connectHead("MQTT", 5, 2), b(2, 0x17, 2), s("c")), ErrProtocol, ProtocolError},
		{"connect auth data without method", 0, raw(0x10, connectHead("MQTT", 5, 2), b(3, 0x16, 0, 0), s("c")), ErrProtocol, ProtocolError},
		{"connect topic alias", 0, raw(0x10, connectHead("MQTT", 5, 2), b(3, 0x23, 0, 1), s("c")), ErrMalformed, MalformedPacket},
		{"connect trailing bytes", 0, raw(0x10, connectHead("MQTT", 4, 2), s("c"), b(0)), ErrMalformed, MalformedPacket},
		{"connect client id not utf-8", 0, raw(0x10, connectHead("MQTT", 4, 2), b(0, 1, 0xfe)), ErrMalformed, MalformedPacket},
		{"connect missing user name", 0, raw(0x10, connectHead("MQTT", 4, 0x82), s("c")), ErrMalformed, MalformedPacket},
		{"connect truncated header", 0, raw(0x10, s("MQTT")), ErrMalformed, MalformedPacket},

		// CONNACK.
		{"connack reserved flags", V311, raw(0x20, b(2, 0)), ErrMalformed, MalformedPacket},
		{"connack return code 6", V311, raw(0x20, b(0, 6)), ErrProtocol, ProtocolError},
		{"connack code 0x10", V5, raw(0x20, b(0, 0x10), noProps), ErrProtocol, ProtocolError},
		{"connack session present on failure", V5, raw(0x20, b(1, 0x87), noProps), ErrProtocol, ProtocolError},
		{"connack maximum qos 2", V5, raw(0x20, b(0, 0), b(2, 0x24, 2)), ErrProtocol, ProtocolError},
		{"connack retain available 2", V5, raw(0x20, b(0, 0), b(2, 0x25, 2)), ErrProtocol, ProtocolError},
		{"connack wildcard available 5", V5, raw(0x20, b(0, 0), b(2, 0x28, 5)), ErrProtocol, ProtocolError},
		{"connack 3.1.1 length 3", V311, raw(0x20, b(0, 0, 0)), ErrMalformed, MalformedPacket},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.in), 0)
			r.SetVersion(c.v)
			p, err := r.ReadPacket()
			if p != nil {
				t.Fatalf("decoded %#v", p)
			}
			wantCodecError(t, err, c.sentinel, c.code)
			_, _, err = Decode(c.in, c.v, 0)
			wantCodecError(t, err, c.sentinel, c.code)
		})
	}
}

// TestMalformedCarriesVersion checks the level reported with CONNECT
// failures, which decides the CONNACK format of the answer.
func TestMalformedCarriesVersion(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want Version
	}{
		{raw(0x10, connectHead("MQIsdp", 3, 2), s("c")), 3},
		{raw(0x10, connectHead("MQTT", 6, 2), s("c")), 6},
		{raw(0x10, connectHead("MQTT", 4, 3), s("c")), V311},
		{raw(0x10, connectHead("MQTT", 5, 3), s("c")), V5},
	} {
		_, _, err := Decode(c.in, 0, 0)
		var e *Error
		if !errors.As(err, &e) || e.Version != c.want || e.Type != TypeConnect {
			t.Errorf("% x: %v (version %v); want version %v", c.in, err, e.Version, c.want)
		}
	}
}

// TestLenient checks inputs that look odd but the specifications allow.
func TestLenient(t *testing.T) {
	for _, c := range []struct {
		name string
		v    Version
		in   []byte
	}{
		{"non-minimal length under 3.1.1", V311, b(0xC0, 0x80, 0x00)},
		{"password without user name in 5.0", 0, raw(0x10, connectHead("MQTT", 5, 0x42), b(0), s("c"), s("p"))},
		{"empty client id in 5.0", 0, raw(0x10, connectHead("MQTT", 5, 0), b(0), s(""))},
		{"empty topic with alias", V5, raw(0x30, s(""), b(3, 0x23, 0, 1))},
		{"BOM kept in topic", V311, raw(0x30, s("\uFEFFa"))},
		{"control character in topic", V311, raw(0x30, s("a\x01b"))},
		{"auth code without properties", V5, raw(0xF0, b(0x18))},
		{"puback code without properties", V5, raw(0x40, b(0, 1, 0x80))},
		{"disconnect empty body", V5, raw(0xE0)},
		{"$share as a plain level", V311, raw(0x82, b(0, 1), s("$sharex/a"), b(0))},
		{"wildcards as whole levels", V311, raw(0x82, b(0, 1), s("+/+/#"), b(0), s("/+/"), b(1))},
		{"payload format 1 with UTF-8 payload", V5, raw(0x30, s("t"), b(2, 0x01, 1), []byte("héllo"))},
	} {
		if _, _, err := Decode(c.in, c.v, 0); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	p, _, err := Decode(raw(0x30, s("\uFEFFa")), V311, 0)
	if err != nil || p.(*Publish).Topic != "\uFEFFa" {
		t.Errorf("BOM stripped or rejected: %v", err)
	}
}

// TestTruncated checks that every proper prefix of a valid packet fails
// as an incomplete read, never as a decoded packet or a panic.
func TestTruncated(t *testing.T) {
	for _, p := range samples() {
		if !encodable(p, V5) {
			continue
		}
		full := encode(t, p, V5)
		if len(full) > 4096 {
			continue
		}
		for n := 0; n < len(full); n++ {
			r := NewReader(bytes.NewReader(full[:n]), 0)
			r.SetVersion(readerVersion(p.Type(), V5))
			_, err := r.ReadPacket()
			want := io.ErrUnexpectedEOF
			if n == 0 {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Fatalf("%v cut at %d of %d: %v; want %v", p.Type(), n, len(full), err, want)
			}
			if _, _, err := Decode(full[:n], readerVersion(p.Type(), V5), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Decode of %v cut at %d: %v", p.Type(), n, err)
			}
		}
	}
}

func TestTopicValidators(t *testing.T) {
	for _, c := range []struct {
		s            string
		name, filter bool
	}{
		{"a/b", true, true},
		{"/", true, true},
		{"", false, false},
		{"#", false, true},
		{"a/#", false, true},
		{"a/#/b", false, false},
		{"a#", false, false},
		{"+", false, true},
		{"+/a/+", false, true},
		{"a+", false, false},
		{"a/+b", false, false},
		{"$SYS/#", false, true},
		{"$share/g/a/b", true, true},
		{"$share/g/#", false, true},
		{"$share/g", true, false},
		{"$share//a", true, false},
		{"$share/g#/a", false, false},
		{"a\x00b", false, false},
		{"\xff", false, false},
		{"ü/☃", true, true},
	} {
		if got := ValidTopicName(c.s); got != c.name {
			t.Errorf("ValidTopicName(%q) = %v", c.s, got)
		}
		if got := ValidTopicFilter(c.s); got != c.filter {
			t.Errorf("ValidTopicFilter(%q) = %v", c.s, got)
		}
	}
}

func TestConnackFor(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		max  int
		ok   bool
		want []byte // the CONNACK's encoding
	}{
		{"3.1 level", raw(0x10, connectHead("MQIsdp", 3, 2), s("c")), 0, true, b(0x20, 2, 0, 1)},
		{"future level", raw(0x10, connectHead("MQTT", 6, 2), s("c")), 0, true, b(0x20, 3, 0, 0x84, 0)},
		{"3.1.1 empty id", raw(0x10, connectHead("MQTT", 4, 0), s("")), 0, true, b(0x20, 2, 0, 2)},
		{"3.1.1 malformed", raw(0x10, connectHead("MQTT", 4, 3), s("c")), 0, false, nil},
		{"5.0 malformed", raw(0x10, connectHead("MQTT", 5, 3), b(0), s("c")), 0, true, b(0x20, 3, 0, 0x81, 0)},
		{"5.0 protocol error", raw(0x10, connectHead("MQTT", 5, 2), b(3, 0x21, 0, 0), s("c")), 0, true, b(0x20, 3, 0, 0x82, 0)},
		{"too large before the level is known", raw(0x10, connectHead("MQTT", 5, 2), b(0), s("c")), 8, false, nil},
	} {
		_, _, err := Decode(c.in, 0, c.max)
		if err == nil {
			t.Fatalf("%s: decoded", c.name)
		}
		ack, v, ok := ConnackFor(err)
		if ok != c.ok {
			t.Fatalf("%s: ok = %v for %v", c.name, ok, err)
		}
		if ok {
			if got := encode(t, ack, v); !bytes.Equal(got, c.want) {
				t.Errorf("%s: CONNACK % x, want % x", c.name, got, c.want)
			}
		}
	}
	if _, _, ok := ConnackFor(io.EOF); ok {
		t.Error("CONNACK for a connection error")
	}
	_, _, err := Decode(raw(0x30, s("a/#")), V5, 0)
	if _, _, ok := ConnackFor(err); ok {
		t.Error("CONNACK for a PUBLISH error")
	}
}
