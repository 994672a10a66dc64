package session

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/wire"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// The session record's stored form. An online session rewrites its
// record with every checkpoint, so a fleet writes it thousands of times a
// second: the form is a compact binary one, written and read without
// reflection. Records written as JSON by earlier versions (a JSON object
// starts with '{') are still read; the next write turns them binary.
//
// Binary form, after the format byte sessionFormat1:
//
//	flags byte (sfOnline, sfClaimed, sfWill, sfRowless), protocol version byte,
//	uvarint expiry, varint disconnected-at (Unix ms),
//	string node, string conn, cursor checkpoint, cursor sent-high,
//	uvarint next packet id,
//	uvarint count of subscriptions, each: string filter, string group,
//	  byte QoS, byte sub flags (subNL, subRAP, subSince, subPos),
//	  byte retain handling, uvarint subscription id, [cursor since],
//	[will: bytes message, uvarint delay],
//	uvarint count of QoS 1 slots, each: cursor position, uvarint packet id.
//
// A string or bytes is a uvarint length and its bytes; a cursor is a
// uvarint key and a uvarint next. Nothing may follow the last field.
//
// sfRowless came after the format: a version that does not know it reads
// the record as one that may hold rows, which is always safe, and writes
// it without the flag.
const sessionFormat1 = 0xB1

const (
	sfOnline = 1 << iota
	sfClaimed
	sfWill
	sfRowless
)

const (
	subNL = 1 << iota
	subRAP
	subSince
	subPos
)

// errForm reports a stored record that does not decode; it wraps
// engine.ErrCorrupt.
var errForm = fmt.Errorf("mqtt: session record: %w", engine.ErrCorrupt)

// Encode returns the binary stored form of s; its index state is not
// part of it. The form of a format byte never changes: a new field takes
// a new format byte, which Decode reads beside the old ones, so data
// written by earlier versions still opens.
func Encode(s *Record) []byte {
	n := 48 + len(s.Node) + len(s.Conn) + 16*len(s.Q1)
	for _, r := range s.Subs {
		n += 24 + len(r.Filter) + len(r.Group)
	}
	if s.Will != nil {
		n += 8 + len(s.Will.Msg)
	}
	b := make([]byte, 0, n)
	var flags byte
	if s.Online {
		flags |= sfOnline
	}
	if s.Claimed {
		flags |= sfClaimed
	}
	if s.Will != nil {
		flags |= sfWill
	}
	if s.Rowless {
		flags |= sfRowless
	}
	b = append(b, sessionFormat1, flags, byte(s.Version))
	b = binary.AppendUvarint(b, uint64(s.Expiry))
	b = binary.AppendVarint(b, s.DisconnectedAt)
	b = appendString(b, s.Node)
	b = appendString(b, s.Conn)
	b = appendCursor(b, s.Checkpoint)
	b = appendCursor(b, s.SentHigh)
	b = binary.AppendUvarint(b, uint64(s.NextPI))
	b = binary.AppendUvarint(b, uint64(len(s.Subs)))
	for _, r := range s.Subs {
		b = appendString(b, r.Filter)
		b = appendString(b, r.Group)
		var sf byte
		if r.NL {
			sf |= subNL
		}
		if r.RAP {
			sf |= subRAP
		}
		if r.Since != nil {
			sf |= subSince
		}
		if r.Pos {
			sf |= subPos
		}
		b = append(b, r.QoS, sf, r.RH)
		b = binary.AppendUvarint(b, uint64(r.ID))
		if r.Since != nil {
			b = appendCursor(b, *r.Since)
		}
	}
	if s.Will != nil {
		b = appendString(b, string(s.Will.Msg))
		b = binary.AppendUvarint(b, uint64(s.Will.Delay))
	}
	b = binary.AppendUvarint(b, uint64(len(s.Q1)))
	for _, q := range s.Q1 {
		b = appendCursor(b, q.Pos)
		b = binary.AppendUvarint(b, uint64(q.PI))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendCursor(b []byte, c table.Cursor) []byte {
	return binary.AppendUvarint(binary.AppendUvarint(b, uint64(c.Key)), uint64(c.Next))
}

// Decode decodes a stored session record, binary or JSON, into s. A
// binary record that does not decode, or has bytes after its last field,
// is refused with an error wrapping engine.ErrCorrupt, never read short;
// a JSON one that does not decode, with encoding/json's error. The
// record's index state is left as it is (see Record.Loaded).
func Decode(v []byte, s *Record) error {
	if len(v) > 0 && v[0] == '{' {
		return json.Unmarshal(v, s)
	}
	d := decoder{wire.Decoder{B: v, Corrupt: errForm}}
	if d.Byte("length") != sessionFormat1 {
		return fmt.Errorf("%w: unknown format", errForm)
	}
	flags := d.Byte("length")
	s.Version = packet.Version(d.Byte("length"))
	s.Expiry = d.uint32()
	s.DisconnectedAt = d.Varint("time")
	s.Online, s.Claimed, s.Rowless = flags&sfOnline != 0, flags&sfClaimed != 0, flags&sfRowless != 0
	s.Node = d.string()
	s.Conn = d.string()
	s.Checkpoint = d.cursor()
	s.SentHigh = d.cursor()
	s.NextPI = d.uint16()
	s.Subs = nil
	if n := d.count(4); n > 0 {
		s.Subs = make([]Sub, n)
		for i := range s.Subs {
			r := &s.Subs[i]
			r.Filter = d.string()
			r.Group = d.string()
			r.QoS = d.Byte("length")
			sf := d.Byte("length")
			r.RH = d.Byte("length")
			r.ID = d.uint32()
			r.NL, r.RAP, r.Pos = sf&subNL != 0, sf&subRAP != 0, sf&subPos != 0
			if sf&subSince != 0 {
				c := d.cursor()
				r.Since = &c
			}
		}
	}
	s.Will = nil
	if flags&sfWill != 0 {
		s.Will = &Will{Msg: []byte(d.string())}
		s.Will.Delay = d.uint32()
	}
	s.Q1 = nil
	if n := d.count(2); n > 0 {
		s.Q1 = make([]Q1Slot, n)
		for i := range s.Q1 {
			s.Q1[i] = Q1Slot{Pos: d.cursor(), PI: d.uint16()}
		}
	}
	switch {
	case d.Err != nil:
		return d.Err
	case len(d.B) > 0:
		return fmt.Errorf("%w: %d bytes after the last field", errForm, len(d.B))
	}
	return nil
}

// decoder reads the binary forms (see wire.Decoder) with the session
// record's own fields on top.
type decoder struct{ wire.Decoder }

func (d *decoder) uint32() uint32 { return uint32(d.Uvarint(math.MaxUint32, "number")) }
func (d *decoder) uint16() uint16 { return uint16(d.Uvarint(math.MaxUint16, "packet id")) }

// count reads a number of items each taking at least min bytes, so a
// corrupt count cannot make the decoder allocate more than the record's
// size warrants.
func (d *decoder) count(min int) int {
	n := d.Uvarint(math.MaxInt32, "count")
	if n > uint64(len(d.B)/min) {
		d.Fail("count")
		return 0
	}
	return int(n)
}

func (d *decoder) string() string {
	n := d.Uvarint(math.MaxInt32, "string")
	if d.Err != nil || n > uint64(len(d.B)) {
		d.Fail("string")
		return ""
	}
	s := string(d.B[:n])
	d.B = d.B[n:]
	return s
}

func (d *decoder) cursor() table.Cursor {
	k := d.Uvarint(math.MaxUint64, "cursor")
	n := d.uint32()
	return table.Cursor{Key: engine.LogKey(k), Next: n}
}

// The outbound QoS 2 record's stored form: the format byte outFormat1,
// uvarint packet id, state byte, cursor position, then the message's
// stored form to the end. JSON records of earlier versions are still read.
const outFormat1 = 0xB2

// Encode returns the binary stored form of r (outFormat1, which, like
// the session record's form, never changes).
func (r *OutRecord) Encode() []byte {
	b := AppendOutHeader(make([]byte, 0, OutHeaderMax+len(r.Msg)), r.PI, r.State, r.Pos)
	return append(b, r.Msg...)
}

// OutHeaderMax bounds what AppendOutHeader appends.
const OutHeaderMax = 1 + binary.MaxVarintLen16 + 1 + 2*binary.MaxVarintLen64

// AppendOutHeader appends to b what Encode writes of an outbound record
// before its message: the record whose message is appended to that (in
// its stored form) is the one Encode returns, without the message
// encoded twice.
func AppendOutHeader(b []byte, pi uint16, state byte, pos table.Cursor) []byte {
	b = append(b, outFormat1)
	b = binary.AppendUvarint(b, uint64(pi))
	b = append(b, state)
	return appendCursor(b, pos)
}

// Decode decodes a stored outbound record, binary or JSON, into r; a
// binary record whose header does not decode is refused with an error
// wrapping engine.ErrCorrupt. r.Msg may share v's bytes.
func (r *OutRecord) Decode(v []byte) error {
	if len(v) > 0 && v[0] == '{' {
		return json.Unmarshal(v, r)
	}
	d := decoder{wire.Decoder{B: v, Corrupt: errForm}}
	if d.Byte("length") != outFormat1 {
		return fmt.Errorf("%w: unknown outbound record format", errForm)
	}
	r.PI = d.uint16()
	r.State = d.Byte("length")
	r.Pos = d.cursor()
	if d.Err != nil {
		return d.Err
	}
	r.Msg = d.B
	return nil
}
