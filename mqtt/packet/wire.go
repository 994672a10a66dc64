package packet

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"unicode/utf8"
)

// decoder walks the body of one packet. The first failure sticks: later
// reads return zero values and leave it in place, so decode functions read
// a whole structure and check d.err once where a decision depends on it.
type decoder struct {
	buf []byte
	off int
	t   Type
	v   Version
	err *Error
	// alias lets binary fields point into buf instead of being copied;
	// set only when buf belongs to the packet being decoded.
	alias bool
	// in shares strings across packets; nil means allocate each one.
	in *interner
}

func (d *decoder) fail(sentinel error, detail string) {
	if d.err == nil {
		d.err = newError(sentinel, d.t, d.v, detail)
	}
}

func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) u8(what string) byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.buf) {
		d.fail(ErrMalformed, what+": packet too short")
		return 0
	}
	b := d.buf[d.off]
	d.off++
	return b
}

func (d *decoder) u16(what string) uint16 {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 2 {
		d.fail(ErrMalformed, what+": packet too short")
		return 0
	}
	v := binary.BigEndian.Uint16(d.buf[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32(what string) uint32 {
	if d.err != nil {
		return 0
	}
	if d.remaining() < 4 {
		d.fail(ErrMalformed, what+": packet too short")
		return 0
	}
	v := binary.BigEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v
}

// vbi reads a Variable Byte Integer: at most four bytes, and under 5.0 in
// its shortest form [MQTT-1.5.5-1].
func (d *decoder) vbi(what string) uint32 {
	if d.err != nil {
		return 0
	}
	var v uint32
	for i := 0; i < 4; i++ {
		if d.off >= len(d.buf) {
			d.fail(ErrMalformed, what+": packet too short")
			return 0
		}
		b := d.buf[d.off]
		d.off++
		v |= uint32(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 && d.v == V5 {
				d.fail(ErrMalformed, what+": variable byte integer not in its shortest form")
				return 0
			}
			return v
		}
	}
	d.fail(ErrMalformed, what+": variable byte integer longer than 4 bytes")
	return 0
}

// raw reads a two-byte length and that many bytes, aliasing buf.
func (d *decoder) raw(what string) []byte {
	n := int(d.u16(what))
	if d.err != nil {
		return nil
	}
	if n > d.remaining() {
		d.fail(ErrMalformed, what+": length exceeds packet")
		return nil
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// str reads a UTF-8 Encoded String [MQTT-1.5.4-1, MQTT-1.5.4-2]. A BOM is
// kept as it is [MQTT-1.5.4-3].
func (d *decoder) str(what string) string {
	b := d.raw(what)
	if d.err != nil {
		return ""
	}
	if !validUTF8(b) {
		d.fail(ErrMalformed, what+": not well-formed UTF-8 or contains U+0000")
		return ""
	}
	return d.in.get(b)
}

// bin reads Binary Data; the result is non-nil even when empty, so that a
// present-but-empty field survives a round trip.
func (d *decoder) bin(what string) []byte {
	b := d.raw(what)
	if d.err != nil {
		return nil
	}
	if d.alias {
		return b
	}
	return append([]byte{}, b...)
}

// end fails unless the whole body was consumed.
func (d *decoder) end() {
	if d.err == nil && d.off != len(d.buf) {
		d.fail(ErrMalformed, "unexpected bytes after the end of the packet")
	}
}

// packetID reads a Packet Identifier, which is never 0 [MQTT-2.2.1-3].
func (d *decoder) packetID() uint16 {
	id := d.u16("packet identifier")
	if d.err == nil && id == 0 {
		d.fail(ErrProtocol, "packet identifier is 0")
	}
	return id
}

// validUTF8 reports whether b is well-formed UTF-8 (which excludes the
// surrogates U+D800..U+DFFF) without U+0000. ASCII is checked inline because
// nearly every topic and key is ASCII.
func validUTF8(b []byte) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == 0 {
			return false
		}
		if c >= utf8.RuneSelf {
			rest := b[i:]
			return utf8.Valid(rest) && bytes.IndexByte(rest, 0) < 0
		}
	}
	return true
}

// interner hands out strings for byte slices, reusing the previous string
// for the same bytes. It is direct-mapped and small, so a connection that
// cycles through many distinct topics costs at most one allocation per
// string, as without it, and a bounded amount of memory.
type interner struct {
	seed  maphash.Seed
	slots [internSlots]string
}

const (
	internSlots  = 64
	internMaxLen = 256
)

func newInterner() *interner { return &interner{seed: maphash.MakeSeed()} }

func (in *interner) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if in == nil || len(b) > internMaxLen {
		return string(b)
	}
	s := &in.slots[maphash.Bytes(in.seed, b)&(internSlots-1)]
	if *s == string(b) {
		return *s
	}
	*s = string(b)
	return *s
}

// Encoding primitives. Callers have checked lengths, so these cannot fail.

func vbiLen(n int) int {
	switch {
	case n < 1<<7:
		return 1
	case n < 1<<14:
		return 2
	case n < 1<<21:
		return 3
	default:
		return 4
	}
}

func appendVBI(dst []byte, n int) []byte {
	for n >= 0x80 {
		dst = append(dst, byte(n)|0x80)
		n >>= 7
	}
	return append(dst, byte(n))
}

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendStr(dst []byte, s string) []byte {
	dst = appendU16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBin(dst []byte, b []byte) []byte {
	dst = appendU16(dst, uint16(len(b)))
	return append(dst, b...)
}

// appendHeader writes the fixed header: type and flags, then the remaining
// length.
func appendHeader(dst []byte, t Type, flags byte, remaining int) []byte {
	dst = append(dst, byte(t)<<4|flags)
	return appendVBI(dst, remaining)
}

// packetSize turns a remaining length into a whole-packet size, failing when
// the remaining length cannot be encoded.
func packetSize(t Type, v Version, remaining int) (int, error) {
	if remaining > MaxRemainingLength {
		return 0, invalid(t, v, "remaining length over 268435455 bytes")
	}
	return 1 + vbiLen(remaining) + remaining, nil
}

// grow makes room for n more bytes with one allocation at most. It grows
// as append does, by a factor of the capacity: a caller appending many
// packets to one buffer (a burst) copies what it holds a few times in
// all, where growing to the exact size would copy it again for every
// packet, quadratic in the burst's size.
func grow(dst []byte, n int) []byte {
	return slices.Grow(dst, n)
}

const maxStr = 65535

// strSize is the encoded size of a string or binary field, with a check of
// its length.
func strSize(n int, t Type, v Version, what string) (int, error) {
	if n > maxStr {
		return 0, invalid(t, v, what+" longer than 65535 bytes")
	}
	return 2 + n, nil
}
