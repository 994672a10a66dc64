package netio

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// countingDst records what a Writer sends and in how many writes.
type countingDst struct {
	bytes.Buffer
	writes int
}

func (d *countingDst) Write(p []byte) (int, error) {
	d.writes++
	return d.Buffer.Write(p)
}

// TestWriterBurstsInOneWrite checks that a burst up to WriteBuf goes out
// in one write whatever buffer it started in: one that outgrows the small
// buffer moves to a large one instead of sending a small write first.
func TestWriterBurstsInOneWrite(t *testing.T) {
	for _, total := range []int{100, SmallWriteBuf, SmallWriteBuf + 1, 3 * SmallWriteBuf, WriteBuf} {
		var d countingDst
		w := NewWriter(&d)
		var want []byte
		for len(want) < total {
			p := bytes.Repeat([]byte{byte(len(want))}, min(100, total-len(want)))
			want = append(want, p...)
			if _, err := w.Write(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if d.writes != 1 || !bytes.Equal(d.Bytes(), want) {
			t.Fatalf("burst of %d bytes: %d writes, %d bytes sent (equal %v); want one write of it all", total, d.writes, d.Len(), bytes.Equal(d.Bytes(), want))
		}
		if w.Buffered() != 0 || w.buf != nil {
			t.Fatalf("burst of %d bytes: the writer holds a buffer after Flush", total)
		}
	}
}

// TestWriterSizesBuffersToBursts checks which buffer a burst starts in:
// small after a burst that fit one, large after one that did not.
func TestWriterSizesBuffersToBursts(t *testing.T) {
	var d countingDst
	w := NewWriter(&d)
	burst := func(n int) int {
		if _, err := w.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		c := cap(*w.buf)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	burst(100)
	if c := burst(100); c != SmallWriteBuf {
		t.Fatalf("a small burst after a small one is in a %d-byte buffer, want %d", c, SmallWriteBuf)
	}
	for range 2 {
		if _, err := w.Write(make([]byte, SmallWriteBuf-10)); err != nil {
			t.Fatal(err)
		}
	}
	if cap(*w.buf) != WriteBuf {
		t.Fatalf("a burst past %d bytes is in a %d-byte buffer, want %d", SmallWriteBuf, cap(*w.buf), WriteBuf)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if c := burst(100); c != WriteBuf {
		t.Fatalf("the burst after a large one starts in a %d-byte buffer, want %d", c, WriteBuf)
	}
	if c := burst(100); c != SmallWriteBuf {
		t.Fatalf("the burst after a small one in a large buffer starts in a %d-byte buffer, want %d", c, SmallWriteBuf)
	}
}

// TestWriterKeepsOrder writes random sizes with random flushes, some
// larger than either buffer, and checks the bytes arrive as written.
func TestWriterKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var d countingDst
	w := NewWriter(&d)
	var want []byte
	for i := range 3000 {
		n := rng.IntN(200)
		switch rng.IntN(50) {
		case 0:
			n = rng.IntN(3 * WriteBuf)
		case 1:
			n = SmallWriteBuf + rng.IntN(SmallWriteBuf)
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(i + j)
		}
		want = append(want, p...)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(10) == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(d.Bytes(), want) {
		t.Fatalf("sent %d bytes, want the %d written, in order", d.Len(), len(want))
	}
}
