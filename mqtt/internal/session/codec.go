package session

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
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
//
// Format sessionFormat2 is the same, for a log split over partitions:
// each checkpoint, sent-high and since is a vector (uvarint count of
// partitions, then that many cursors) and each QoS 1 slot's position a
// uvarint partition before its cursor. A record whose positions are all
// in a log of one partition is written in sessionFormat1, so a store
// that never had more than one partition keeps the bytes it always had.
const (
	sessionFormat1 = 0xB1
	sessionFormat2 = 0xB3
)

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
	split := s.split()
	if split {
		n += 2 * 16 * s.Checkpoint.Len()
	}
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
	format := byte(sessionFormat1)
	if split {
		format = sessionFormat2
	}
	e := encoder{split: split}
	b = append(b, format, flags, byte(s.Version))
	b = binary.AppendUvarint(b, uint64(s.Expiry))
	b = binary.AppendVarint(b, s.DisconnectedAt)
	b = appendString(b, s.Node)
	b = appendString(b, s.Conn)
	b = e.vec(b, s.Checkpoint)
	b = e.vec(b, s.SentHigh)
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
			b = e.vec(b, *r.Since)
		}
	}
	if s.Will != nil {
		b = appendString(b, string(s.Will.Msg))
		b = binary.AppendUvarint(b, uint64(s.Will.Delay))
	}
	b = binary.AppendUvarint(b, uint64(len(s.Q1)))
	for _, q := range s.Q1 {
		b = e.pos(b, q.Pos)
		b = binary.AppendUvarint(b, uint64(q.PI))
	}
	return b
}

// split reports whether some position of s is in a log of more than one
// partition, which sessionFormat1 cannot hold.
func (s *Record) split() bool {
	if s.Checkpoint.Len() > 1 || s.SentHigh.Len() > 1 {
		return true
	}
	for _, r := range s.Subs {
		if r.Since != nil && r.Since.Len() > 1 {
			return true
		}
	}
	for _, q := range s.Q1 {
		if q.Pos.Part != 0 {
			return true
		}
	}
	return false
}

// encoder writes positions in the form of the record's format: split for
// sessionFormat2.
type encoder struct{ split bool }

func (e encoder) vec(b []byte, v logpos.Vec) []byte {
	if !e.split {
		return appendCursor(b, v.Of(0))
	}
	b = binary.AppendUvarint(b, uint64(v.Len()))
	for i := range v.Len() {
		b = appendCursor(b, v.Of(i))
	}
	return b
}

func (e encoder) pos(b []byte, p logpos.Pos) []byte {
	if e.split {
		b = binary.AppendUvarint(b, uint64(p.Part))
	}
	return appendCursor(b, p.C)
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
	d := decoder{Decoder: wire.Decoder{B: v, Corrupt: errForm}}
	switch d.Byte("length") {
	case sessionFormat1:
	case sessionFormat2:
		d.split = true
	default:
		return fmt.Errorf("%w: unknown format", errForm)
	}
	flags := d.Byte("length")
	s.Version = packet.Version(d.Byte("length"))
	s.Expiry = d.uint32()
	s.DisconnectedAt = d.Varint("time")
	s.Online, s.Claimed, s.Rowless = flags&sfOnline != 0, flags&sfClaimed != 0, flags&sfRowless != 0
	s.Node = d.string()
	s.Conn = d.string()
	s.Checkpoint = d.vec()
	s.SentHigh = d.vec()
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
				c := d.vec()
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
			s.Q1[i] = Q1Slot{Pos: d.pos(), PI: d.uint16()}
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
// record's own fields on top; split says positions are in their form
// for a log of several partitions.
type decoder struct {
	wire.Decoder
	split bool
}

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

func (d *decoder) vec() logpos.Vec {
	if !d.split {
		return logpos.One(d.cursor())
	}
	n := d.Uvarint(logpos.Max, "partitions")
	if n == 0 {
		d.Fail("partitions")
	}
	if d.Err != nil {
		return logpos.Vec{}
	}
	v := logpos.Start(int(n))
	for i := range int(n) {
		v.Set(i, d.cursor())
	}
	return v
}

func (d *decoder) pos() logpos.Pos {
	var p uint64
	if d.split {
		p = d.Uvarint(logpos.Max-1, "partition")
	}
	return logpos.At(int(p), d.cursor())
}

// The outbound QoS 2 record's stored form: the format byte outFormat1,
// uvarint packet id, state byte, cursor position, then the message's
// stored form to the end. JSON records of earlier versions are still read.
// A message in a partition other than the first takes outFormat2, with
// the partition (uvarint) before the cursor.
const (
	outFormat1 = 0xB2
	outFormat2 = 0xB4
)

// Encode returns the binary stored form of r (outFormat1, which, like
// the session record's form, never changes).
func (r *OutRecord) Encode() []byte {
	b := AppendOutHeader(make([]byte, 0, OutHeaderMax+len(r.Msg)), r.PI, r.State, r.Pos)
	return append(b, r.Msg...)
}

// OutHeaderMax bounds what AppendOutHeader appends.
const OutHeaderMax = 1 + binary.MaxVarintLen16 + 1 + 1 + 2*binary.MaxVarintLen64

// AppendOutHeader appends to b what Encode writes of an outbound record
// before its message: the record whose message is appended to that (in
// its stored form) is the one Encode returns, without the message
// encoded twice.
func AppendOutHeader(b []byte, pi uint16, state byte, pos logpos.Pos) []byte {
	split := pos.Part != 0
	if split {
		b = append(b, outFormat2)
	} else {
		b = append(b, outFormat1)
	}
	b = binary.AppendUvarint(b, uint64(pi))
	b = append(b, state)
	return encoder{split: split}.pos(b, pos)
}

// Decode decodes a stored outbound record, binary or JSON, into r; a
// binary record whose header does not decode is refused with an error
// wrapping engine.ErrCorrupt. r.Msg may share v's bytes.
func (r *OutRecord) Decode(v []byte) error {
	if len(v) > 0 && v[0] == '{' {
		return json.Unmarshal(v, r)
	}
	d := decoder{Decoder: wire.Decoder{B: v, Corrupt: errForm}}
	switch d.Byte("length") {
	case outFormat1:
	case outFormat2:
		d.split = true
	default:
		return fmt.Errorf("%w: unknown outbound record format", errForm)
	}
	r.PI = d.uint16()
	r.State = d.Byte("length")
	r.Pos = d.pos()
	if d.Err != nil {
		return d.Err
	}
	r.Msg = d.B
	return nil
}
