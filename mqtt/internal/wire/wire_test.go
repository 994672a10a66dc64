package wire

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

var errTest = errors.New("test form")

// TestDecoderReadsAndSticks reads a form field by field, then checks that
// a bad field fails with the form's error naming it, and that every read
// after it returns zero.
func TestDecoderReadsAndSticks(t *testing.T) {
	b := []byte{7}
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	d := Decoder{B: b, Corrupt: errTest}
	if c, u, v, s := d.Byte("a"), d.Uvarint(1000, "b"), d.Varint("c"), d.Bytes("d"); c != 7 || u != 300 || v != -5 || string(s) != "abc" || d.Err != nil || len(d.B) != 0 {
		t.Fatalf("read %d %d %d %q, err %v, %d bytes left", c, u, v, s, d.Err, len(d.B))
	}
	if cap(d.Bytes("e")) != 0 {
		t.Fatal("a read past the end returned bytes")
	}
	if !errors.Is(d.Err, errTest) || !strings.Contains(d.Err.Error(), "bad e") {
		t.Fatalf("error %v: want the form's error naming field e", d.Err)
	}
	d = Decoder{B: binary.AppendUvarint(nil, 2000), Corrupt: errTest}
	if d.Uvarint(1000, "n") != 0 || d.Err == nil || d.Byte("x") != 0 || !strings.Contains(d.Err.Error(), "bad n") {
		t.Fatalf("a number over its bound: err %v", d.Err)
	}
	// A length past the end fails without reading it.
	d = Decoder{B: append(binary.AppendUvarint(nil, 9), "ab"...), Corrupt: errTest}
	if d.Bytes("s") != nil || d.Err == nil {
		t.Fatalf("a length past the end: err %v", d.Err)
	}
}
