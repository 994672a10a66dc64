package packet

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	pv5 "github.com/eclipse/paho.golang/packets"
)

// benchPublish is a typical telemetry PUBLISH: QoS 1, a three-level topic,
// under 5.0 a message expiry and one user property.
func benchPublish(v Version, size int) *Publish {
	p := &Publish{Topic: "devices/4711/telemetry", QoS: QoS1, PacketID: 42, Payload: bytes.Repeat([]byte("x"), size)}
	if v == V5 {
		p.Properties.SetMessageExpiry(3600)
		p.Properties.AddUser("src", "edge-7")
	}
	return p
}

var benchSizes = []int{64, 1024, 16 << 10}

func BenchmarkDecodePublish(b *testing.B) {
	for _, v := range []Version{V311, V5} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%v/%dB", v, size), func(b *testing.B) {
				pkt := encode(b, benchPublish(v, size), v)
				r := NewReader(bufio.NewReaderSize(&repeatReader{pkt: pkt}, 64<<10), 0)
				r.SetVersion(v)
				b.SetBytes(int64(len(pkt)))
				b.ReportAllocs()
				for b.Loop() {
					p, err := r.ReadPacket()
					if err != nil {
						b.Fatal(err)
					}
					p.(*Publish).Release()
				}
			})
		}
	}
}

func BenchmarkEncodePublish(b *testing.B) {
	for _, v := range []Version{V311, V5} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%v/%dB", v, size), func(b *testing.B) {
				p := benchPublish(v, size)
				buf := make([]byte, 0, 32<<10)
				b.SetBytes(int64(len(encode(b, p, v))))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if buf, err = p.Append(buf[:0], v); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkWriterPublish(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("5.0/%dB", size), func(b *testing.B) {
			p := benchPublish(V5, size)
			w := NewWriter(bufio.NewWriterSize(io.Discard, 64<<10), V5)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WritePacket(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecodePuback(b *testing.B) {
	pkt := encode(b, &Puback{PacketID: 42}, V5)
	r := NewReader(bufio.NewReader(&repeatReader{pkt: pkt}), 0)
	r.SetVersion(V5)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.ReadPacket(); err != nil {
			b.Fatal(err)
		}
	}
}

// The paho.golang benchmarks give the figures above a point of comparison
// on the same packets.

func BenchmarkPahoDecodePublish(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("5.0/%dB", size), func(b *testing.B) {
			pkt := encode(b, benchPublish(V5, size), V5)
			r := bufio.NewReaderSize(&repeatReader{pkt: pkt}, 64<<10)
			b.SetBytes(int64(len(pkt)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pv5.ReadPacket(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPahoEncodePublish(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("5.0/%dB", size), func(b *testing.B) {
			p := toPaho5(benchPublish(V5, size))
			var buf bytes.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if _, err := p.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
