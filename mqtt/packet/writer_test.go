package packet

import (
	"bytes"
	"testing"
)

// WriteAck writes what encoding the acknowledgement packet writes, under
// both versions, and refuses the types it does not write.
func TestWriteAckMatchesPackets(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		for _, id := range []uint16{1, 0x1234, 0xFFFF} {
			for _, p := range []Packet{&Puback{PacketID: id}, &Pubrec{PacketID: id}, &Pubrel{PacketID: id}, &Pubcomp{PacketID: id}} {
				want, err := p.Append(nil, v)
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				w := NewWriter(&got, v)
				if err := w.WriteAck(p.Type(), id); err != nil {
					t.Fatalf("%v %v: %v", v, p.Type(), err)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("%v %v id %d: WriteAck wrote % x, the packet encodes as % x", v, p.Type(), id, got.Bytes(), want)
				}
			}
		}
	}
	w := NewWriter(&bytes.Buffer{}, V5)
	if err := w.WriteAck(TypePublish, 1); err == nil {
		t.Fatal("WriteAck wrote a PUBLISH")
	}
}
