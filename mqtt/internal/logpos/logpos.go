// Package logpos holds the broker's positions in its message log, which
// may be split over several partitions (table.Partitions): a message's
// place (Pos: its partition and its cursor there) and a session's
// progress (Vec: one cursor per partition, such as its acknowledged
// checkpoint).
//
// Both are values: a Vec is copied, never shared, so a session record
// copied for a write cannot see the sender move its checkpoint, which a
// slice would let happen. With one partition they are a table.Cursor and
// nothing more, and their text forms are a cursor's, so a store written
// before the log could be split reads the same.
package logpos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidemark-io/tidemark/table"
)

// Max is the most partitions a broker's log is split into: a Vec holds
// that many cursors in place.
const Max = 16

// Pos is the place of one message in the log: its partition and its
// cursor in that partition's log. Positions of one partition order as
// their cursors do; those of different partitions have no order between
// them (Less orders them by partition, so that sorting is repeatable).
type Pos struct {
	Part uint8
	C    table.Cursor
}

// At returns the position of cursor c in partition part.
func At(part int, c table.Cursor) Pos { return Pos{Part: uint8(part), C: c} }

// Less reports whether p sorts before q: by partition, then by cursor.
func (p Pos) Less(q Pos) bool {
	if p.Part != q.Part {
		return p.Part < q.Part
	}
	return p.C.Less(q.C)
}

// String renders p: the cursor's text form ("K" or "K.N"), after the
// partition and a slash when the partition is not the first ("2/K.N").
func (p Pos) String() string {
	if p.Part == 0 {
		return p.C.String()
	}
	return strconv.Itoa(int(p.Part)) + "/" + p.C.String()
}

// ParsePos reads the form String writes.
func ParsePos(s string) (Pos, error) {
	var p Pos
	if ps, cs, ok := strings.Cut(s, "/"); ok {
		n, err := strconv.ParseUint(ps, 10, 8)
		if err != nil || n == 0 || n >= Max {
			return Pos{}, fmt.Errorf("%w: position %q: no partition %q", table.ErrBadCursor, s, ps)
		}
		p.Part, s = uint8(n), cs
	}
	if err := p.C.UnmarshalText([]byte(s)); err != nil {
		return Pos{}, err
	}
	return p, nil
}

// MarshalText encodes p as String does.
func (p Pos) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText decodes the form MarshalText writes, and so a cursor's
// text form too.
func (p *Pos) UnmarshalText(b []byte) error {
	q, err := ParsePos(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Vec is a position in every partition's log: one cursor per partition.
// The zero Vec is the start of a log of one partition.
type Vec struct {
	// more is the count of partitions beyond the first, so that the zero
	// value holds one.
	more uint8
	c    [Max]table.Cursor
}

// One returns the Vec of a log of one partition at c.
func One(c table.Cursor) Vec { return Vec{c: [Max]table.Cursor{c}} }

// Start returns the start of a log of n partitions (1 <= n <= Max).
func Start(n int) Vec {
	if n < 1 || n > Max {
		panic(fmt.Sprintf("logpos: %d partitions, want 1 to %d", n, Max))
	}
	return Vec{more: uint8(n - 1)}
}

// FromCursors returns the Vec of cs, one cursor per partition.
func FromCursors(cs table.Cursors) (Vec, error) {
	if len(cs) < 1 || len(cs) > Max {
		return Vec{}, fmt.Errorf("%w: %d cursors, want 1 to %d", table.ErrBadCursor, len(cs), Max)
	}
	v := Start(len(cs))
	copy(v.c[:], cs)
	return v, nil
}

// Len is the number of partitions v holds a cursor of.
func (v Vec) Len() int { return int(v.more) + 1 }

// Of returns v's cursor in partition p.
func (v Vec) Of(p int) table.Cursor { return v.c[p] }

// Set makes c v's cursor in partition p.
func (v *Vec) Set(p int, c table.Cursor) { v.c[p] = c }

// Cursors returns v as table.Cursors.
func (v Vec) Cursors() table.Cursors { return append(table.Cursors(nil), v.c[:v.Len()]...) }

// Covers reports whether p is at or before v's cursor in p's partition.
func (v Vec) Covers(p Pos) bool { return !v.c[p.Part].Less(p.C) }

// Advance moves v's cursor in p's partition up to p, if it is below.
func (v *Vec) Advance(p Pos) {
	if v.c[p.Part].Less(p.C) {
		v.c[p.Part] = p.C
	}
}

// Below reports whether some cursor of v is before w's in its partition.
func (v Vec) Below(w Vec) bool {
	for i := range v.Len() {
		if v.c[i].Less(w.c[i]) {
			return true
		}
	}
	return false
}

// Max returns, per partition, the higher of v's and w's cursors.
func (v Vec) Max(w Vec) Vec {
	for i := range v.Len() {
		if v.c[i].Less(w.c[i]) {
			v.c[i] = w.c[i]
		}
	}
	return v
}

// Min returns, per partition, the lower of v's and w's cursors.
func (v Vec) Min(w Vec) Vec {
	for i := range v.Len() {
		if w.c[i].Less(v.c[i]) {
			v.c[i] = w.c[i]
		}
	}
	return v
}

// IsZero reports whether every cursor of v is the zero cursor.
func (v Vec) IsZero() bool {
	for i := range v.Len() {
		if v.c[i] != (table.Cursor{}) {
			return false
		}
	}
	return true
}

// String renders v as table.Cursors does ("12,7.3,0"); with one
// partition, as its cursor ("12").
func (v Vec) String() string { return table.Cursors(v.c[:v.Len()]).String() }

// ParseVec reads the form String writes.
func ParseVec(s string) (Vec, error) {
	var cs table.Cursors
	if err := cs.UnmarshalText([]byte(s)); err != nil {
		return Vec{}, err
	}
	return FromCursors(cs)
}

// MarshalText encodes v as String does.
func (v Vec) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText decodes the form MarshalText writes, and so a cursor's
// text form too: JSON session records of early versions read as Vecs of
// one partition.
func (v *Vec) UnmarshalText(b []byte) error {
	w, err := ParseVec(string(b))
	if err != nil {
		return err
	}
	*v = w
	return nil
}
