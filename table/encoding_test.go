package table

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

func TestCursorEncodings(t *testing.T) {
	for _, c := range []Cursor{{}, {Key: 1}, {Key: 1<<63 + 5}, {Key: 42, Next: 1}, {Key: 42, Next: 1<<32 - 1}} {
		txt, _ := c.MarshalText()
		var back Cursor
		if err := back.UnmarshalText(txt); err != nil || back != c {
			t.Fatalf("text %q of %+v decoded to %+v, %v", txt, c, back, err)
		}
		bin, _ := c.MarshalBinary()
		back = Cursor{}
		if err := back.UnmarshalBinary(bin); err != nil || back != c {
			t.Fatalf("binary %x of %+v decoded to %+v, %v", bin, c, back, err)
		}
	}
	if got := (Cursor{Key: 7, Next: 3}).String(); got != "7.3" {
		t.Fatalf("String = %q", got)
	}
	var c Cursor
	for _, bad := range []string{"", "x", "1.", "1.0", "1.x", "-1", "1.2.3", "18446744073709551616"} {
		if err := c.UnmarshalText([]byte(bad)); !errors.Is(err, ErrBadCursor) || !errors.Is(err, engine.ErrCorrupt) {
			t.Fatalf("UnmarshalText(%q) = %v, want ErrBadCursor", bad, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, make([]byte, 9), make([]byte, 12)} {
		if err := c.UnmarshalBinary(bad); !errors.Is(err, ErrBadCursor) {
			t.Fatalf("UnmarshalBinary(%x) = %v, want ErrBadCursor", bad, err)
		}
	}
}

func TestCursorOrder(t *testing.T) {
	whole, part := Cursor{Key: 10}, Cursor{Key: 10, Next: 2}
	if !whole.Covers(10, 1000) || !whole.Covers(9, 0) || whole.Covers(11, 0) {
		t.Fatalf("coarse cursor coverage wrong")
	}
	if !part.Covers(10, 1) || part.Covers(10, 2) || !part.Covers(9, 5) {
		t.Fatalf("composite cursor coverage wrong")
	}
	if !part.Less(whole) || whole.Less(part) || !(Cursor{Key: 9}).Less(part) {
		t.Fatalf("cursor order wrong")
	}
	if part.Coarse() != (Cursor{Key: 9}) || whole.Coarse() != whole || (Cursor{}).Coarse() != (Cursor{}) {
		t.Fatalf("Coarse wrong: %v %v", part.Coarse(), whole.Coarse())
	}
	if (Event{Key: 5, Index: 1, Count: 3}).Cursor() != (Cursor{Key: 5, Next: 2}) || (Event{Key: 5, Index: 2, Count: 3}).Cursor() != (Cursor{Key: 5}) {
		t.Fatalf("Event.Cursor wrong")
	}
}

func TestKeysAreOrderedAndUnambiguous(t *testing.T) {
	// (table, id) pairs in the order their keys must sort.
	pairs := [][2]string{{"a", "\x00"}, {"a", "b"}, {"a", "b\x00"}, {"a", "c"}, {"a\x01", "a"}, {"ab", ""}, {"ab", "a"}, {"b", "a"}}
	for i := 1; i < len(pairs); i++ {
		p, q := dataKey(kindRecord, pairs[i-1][0], pairs[i-1][1]), dataKey(kindRecord, pairs[i][0], pairs[i][1])
		if bytes.Compare(p, q) >= 0 {
			t.Fatalf("key of %q sorts at or after %q", pairs[i-1], pairs[i])
		}
	}
	lo, hi, _ := prefixBounds("a", "b\xff\xff")
	for _, id := range []string{"b\xff\xff", "b\xff\xff\xff", "b\xff\xff\x00"} {
		if k := dataKey(kindRecord, "a", id); bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Fatalf("id %q outside prefix bounds", id)
		}
	}
	if k := dataKey(kindRecord, "a", "c"); bytes.Compare(k, hi) < 0 {
		t.Fatalf("id c inside the bounds of prefix b\\xff\\xff")
	}
	lo, hi, _ = prefixBounds("a", "")
	if k := dataKey(kindRecord, "ab", "x"); bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0 {
		t.Fatalf("table ab inside the bounds of table a")
	}
}

func TestNameLimits(t *testing.T) {
	if err := validID("t", strings.Repeat("x", MaxIDLen("t"))); err != nil {
		t.Fatalf("id at the limit: %v", err)
	}
	if k := dataKey(kindVersion, "t", strings.Repeat("x", MaxIDLen("t"))); len(k) != engine.MaxKeySize {
		t.Fatalf("key at the id limit is %d bytes, the engine limit is %d", len(k), engine.MaxKeySize)
	}
	for _, c := range []struct {
		table, id string
		want      error
	}{
		{"t", strings.Repeat("x", MaxIDLen("t")+1), engine.ErrKeyTooLarge},
		{"t", "", engine.ErrInvalidKey},
		{"", "x", engine.ErrInvalidKey},
		{"a\x00b", "x", engine.ErrInvalidKey},
		{strings.Repeat("t", MaxTableName+1), "x", engine.ErrKeyTooLarge},
	} {
		if err := validID(c.table, c.id); !errors.Is(err, ErrInvalidName) || !errors.Is(err, c.want) {
			t.Fatalf("validID(%q, %d bytes) = %v, want ErrInvalidName and %v", c.table, len(c.id), err, c.want)
		}
	}
}

func TestDecodeEntryRejectsGarbage(t *testing.T) {
	good := encodeEntry(OpPut, "t", "id", 7, []byte("v"))
	e := decodeEntry(engine.Entry{Key: 1, Count: 1, Value: good})
	if e.err != nil || e.table != "t" || e.id != "id" || e.version != 7 || string(e.value) != "v" || e.op != OpPut {
		t.Fatalf("decode good entry: %+v", e)
	}
	for i := 0; i < len(good)-1; i++ {
		bad := decodeEntry(engine.Entry{Key: 1, Count: 1, Value: good[:i]})
		if !errors.Is(bad.err, engine.ErrCorrupt) {
			t.Fatalf("truncated entry of %d bytes decoded: %+v", i, bad)
		}
	}
	for _, b := range [][]byte{{9, 1}, {entryFormat, 0}, {entryFormat, 99}, {entryFormat, byte(OpPut), 200}} {
		if bad := decodeEntry(engine.Entry{Key: 1, Count: 1, Value: b}); !errors.Is(bad.err, engine.ErrCorrupt) {
			t.Fatalf("garbage %x decoded", b)
		}
	}
	if _, err := decodeRecord("t", "x", []byte{1, 0}); !errors.Is(err, engine.ErrCorrupt) {
		t.Fatalf("short record decoded: %v", err)
	}
}

// An id too long for the key room is keyed by its first bytes and its
// hash: the key stays within the engine limit, two long ids that share
// those bytes get different keys, and the record carries the whole id.
func TestLongIDKeys(t *testing.T) {
	long := strings.Repeat("x", 3000)
	a, b := long+"a", long+"b"
	ka, kb := dataKey(kindRecord, "t", a), dataKey(kindRecord, "t", b)
	if len(ka) != engine.MaxKeySize || len(kb) != engine.MaxKeySize {
		t.Fatalf("long id keys of %d and %d bytes, want %d", len(ka), len(kb), engine.MaxKeySize)
	}
	if bytes.Equal(ka, kb) {
		t.Fatal("two long ids share a key")
	}
	lo, hi, exact := prefixBounds("t", long)
	if exact {
		t.Fatal("bounds of a prefix longer than the key room claimed exact")
	}
	for _, k := range [][]byte{ka, kb, dataKey(kindRecord, "t", strings.Repeat("x", 460))} { // the last is inside, without the prefix: Range checks
		if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Fatalf("key %.20x... outside the bounds of its prefix", k)
		}
	}
	for _, deleted := range []bool{false, true} {
		r, err := decodeRecord("t", "ignored", encodeRecord("t", a, 9, deleted, []byte("v")))
		if err != nil || r.ID != a || r.Version != 9 || r.Deleted != deleted || (!deleted && string(r.Value) != "v") {
			t.Fatalf("long id record: %+v, %v", r, err)
		}
	}
	enc := encodeRecord("t", a, 9, false, []byte("v"))
	for i := recordHdrSize; i < recordHdrSize+3; i++ {
		if _, err := decodeRecord("t", "x", enc[:i]); !errors.Is(err, engine.ErrCorrupt) {
			t.Fatalf("long record cut at %d decoded: %v", i, err)
		}
	}
	if r, err := decodeRecord("t", "short", encodeRecord("t", "short", 3, false, []byte("v"))); err != nil || r.ID != "short" {
		t.Fatalf("short id record: %+v, %v", r, err)
	}
}
