package packet

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Fuzz targets. Run one with, for example:
//
//	go test ./mqtt/packet/ -run XXX -fuzz FuzzDecodeV5 -fuzztime 60s
//
// The seeds are every sample packet and every malformed case.

func FuzzDecodeV311(f *testing.F)    { fuzzDecode(f, V311) }
func FuzzDecodeV5(f *testing.F)      { fuzzDecode(f, V5) }
func FuzzDecodeConnect(f *testing.F) { fuzzDecode(f, 0) }

// addSeeds adds the encodings of the samples and the malformed inputs that
// apply to level v (0: a fresh server connection).
func addSeeds(f *testing.F, v Version, prefix ...byte) {
	for _, ev := range []Version{V311, V5} {
		for _, p := range samples() {
			if p.Type() == TypeConnect && v != 0 && v != ev {
				continue
			}
			if (v == 0) != (p.Type() == TypeConnect) || (v != 0 && ev != v) || !encodable(p, ev) {
				continue
			}
			b, err := p.Append(append([]byte{}, prefix...), ev)
			if err == nil && len(b) < 4096 {
				f.Add(b)
			}
		}
	}
	for _, c := range malformedCases() {
		if c.v == v {
			f.Add(append(append([]byte{}, prefix...), c.in...))
		}
	}
}

// fuzzDecode reads a stream of packets at level v (0: starting with a
// CONNECT of any level) and checks, for each packet, that the Reader and
// Decode agree, that failures are well-formed, and that the packet
// re-encodes to something that decodes to the same packet.
func fuzzDecode(f *testing.F, v Version) {
	addSeeds(f, v)
	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		r := NewReader(cr, 0)
		r.SetVersion(v)
		for i := 0; i < 64; i++ {
			before, level := cr.n, r.Version()
			p, err := r.ReadPacket()
			q, n, derr := Decode(data[before:], level, 0)
			if err != nil {
				checkFailure(t, err)
				if derr == nil {
					t.Fatalf("Reader failed with %v where Decode succeeded", err)
				}
				return
			}
			if derr != nil || n != cr.n-before {
				t.Fatalf("Decode: %v, %d bytes; Reader consumed %d", derr, n, cr.n-before)
			}
			if !equalPackets(p, q) {
				t.Fatalf("Reader and Decode disagree:\n%#v\n%#v", canon(p), canon(q))
			}
			ev := level
			if c, ok := p.(*Connect); ok {
				ev = c.Version
			}
			reencode(t, p, ev)
			if pub, ok := p.(*Publish); ok {
				pub.Release()
			}
		}
	})
}

// checkFailure fails unless err is a codec error with a known sentinel and
// its code, or an end of input.
func checkFailure(t *testing.T, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
	if codeOf(e.Err) != e.Code || e.Code == ImplementationSpecificError {
		t.Fatalf("error %v carries code %v", err, e.Code)
	}
}

// reencode checks that a decoded packet encodes, and that the encoding
// decodes to the same packet and re-encodes to the same bytes.
func reencode(t *testing.T, p Packet, v Version) {
	b, err := p.Append(nil, v)
	if err != nil {
		t.Fatalf("decoded %v does not encode for %v: %v\n%#v", p.Type(), v, err, canon(p))
	}
	if n, err := p.Size(v); err != nil || n != len(b) {
		t.Fatalf("Size %d, %v; encoded %d", n, err, len(b))
	}
	q, n, err := Decode(b, readerVersion(p.Type(), v), 0)
	if err != nil || n != len(b) {
		t.Fatalf("re-encoded %v does not decode: %v\n% x", p.Type(), err, b)
	}
	if !equalPackets(p, q) {
		t.Fatalf("decode(encode(p)) != p:\n%#v\n%#v", canon(p), canon(q))
	}
	b2, err := q.Append(nil, v)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("encoding is not stable: %v\n% x\n% x", err, b, b2)
	}
}

// FuzzRoundTrip takes a level from the first byte and a packet from the
// rest: whatever decodes must survive decode, encode, decode unchanged.
func FuzzRoundTrip(f *testing.F) {
	addSeeds(f, V311, 4)
	addSeeds(f, V5, 5)
	addSeeds(f, 0, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		v := Version(data[0])
		switch v {
		case 0, V311, V5:
		default:
			v = V5
		}
		p, _, err := Decode(data[1:], v, 0)
		if err != nil {
			checkFailure(t, err)
			return
		}
		if c, ok := p.(*Connect); ok {
			v = c.Version
		}
		reencode(t, p, v)
	})
}
