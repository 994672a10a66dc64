// Package wire reads the broker's binary stored forms (a message, a
// session record): fields in a byte slice, numbers as varints and byte
// strings with a uvarint length before them.
package wire

import (
	"encoding/binary"
	"fmt"
)

// Decoder reads fields off the front of B. The first error sticks: it
// wraps Corrupt and names the field, B is emptied, and every read after
// it returns zero, so a caller reads a whole form and checks Err once.
type Decoder struct {
	B   []byte
	Err error
	// Corrupt is the error Err wraps: the stored form's own.
	Corrupt error
}

// Fail records that the field what does not decode.
func (d *Decoder) Fail(what string) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: bad %s", d.Corrupt, what)
	}
	d.B = nil
}

// Byte reads one byte, the field what.
func (d *Decoder) Byte(what string) byte {
	if len(d.B) == 0 {
		d.Fail(what)
		return 0
	}
	c := d.B[0]
	d.B = d.B[1:]
	return c
}

// Uvarint reads an unsigned varint of at most max, the field what.
func (d *Decoder) Uvarint(max uint64, what string) uint64 {
	v, n := binary.Uvarint(d.B)
	if n <= 0 || v > max {
		d.Fail(what)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Varint reads a signed varint, the field what.
func (d *Decoder) Varint(what string) int64 {
	v, n := binary.Varint(d.B)
	if n <= 0 {
		d.Fail(what)
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Bytes reads a byte string with its uvarint length before it, the field
// what. The result aliases B.
func (d *Decoder) Bytes(what string) []byte {
	n := d.Uvarint(uint64(len(d.B)), what)
	if d.Err != nil || n > uint64(len(d.B)) {
		d.Fail(what)
		return nil
	}
	v := d.B[:n:n]
	d.B = d.B[n:]
	return v
}
