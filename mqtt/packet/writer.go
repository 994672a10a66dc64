package packet

import (
	"fmt"
	"io"
)

// Writer encodes packets for one connection onto an io.Writer through a
// reused buffer. Give it a *bufio.Writer to coalesce small packets, and
// flush that yourself. A Writer is used by one goroutine at a time.
type Writer struct {
	w       io.Writer
	version Version
	maxSize int
	buf     []byte
}

// directPayload is the payload size from which a PUBLISH is written as its
// header followed by the payload in place, rather than copied behind the
// header first.
const directPayload = 4 << 10

// NewWriter returns a Writer encoding for level v with no size limit
// beyond the protocol's.
func NewWriter(w io.Writer, v Version) *Writer {
	return &Writer{w: w, version: v, maxSize: MaxPacketSize}
}

// SetVersion changes the protocol level packets are encoded for.
func (w *Writer) SetVersion(v Version) { w.version = v }

// SetMaxPacketSize sets the peer's Maximum Packet Size: WritePacket refuses
// larger packets with ErrPacketTooLarge and writes nothing, as the
// specification requires of the sender [MQTT-3.1.2-24]. Zero or negative
// means the protocol's limit.
func (w *Writer) SetMaxPacketSize(n int) {
	if n <= 0 || n > MaxPacketSize {
		n = MaxPacketSize
	}
	w.maxSize = n
}

// WritePacket encodes p and writes it. On an encoding error nothing is
// written.
func (w *Writer) WritePacket(p Packet) error {
	if pub, ok := p.(*Publish); ok && len(pub.Payload) >= directPayload {
		n, err := pub.Size(w.version)
		if err != nil {
			return err
		}
		if n > w.maxSize {
			return newError(ErrPacketTooLarge, TypePublish, w.version, "packet exceeds the peer's maximum packet size")
		}
		head, err := pub.AppendHeader(w.buf[:0], w.version)
		if err != nil {
			return err
		}
		w.keep(head)
		if _, err := w.w.Write(head); err != nil {
			return err
		}
		_, err = w.w.Write(pub.Payload)
		return err
	}
	b, err := p.Append(w.buf[:0], w.version)
	if err != nil {
		return err
	}
	w.keep(b)
	if len(b) > w.maxSize {
		return newError(ErrPacketTooLarge, p.Type(), w.version, "packet exceeds the peer's maximum packet size")
	}
	_, err = w.w.Write(b)
	return err
}

// WriteAck writes the PUBACK, PUBREC, PUBREL or PUBCOMP (t) of packet id
// with reason Success and no properties, the same four bytes under 3.1.1
// and 5.0: every acknowledgement of a stored message, and a delivery's
// PUBREL, written without a packet value to build.
func (w *Writer) WriteAck(t Type, id uint16) error {
	var flags byte
	switch t {
	case TypePuback, TypePubrec, TypePubcomp:
	case TypePubrel:
		flags = 0x02 // [MQTT-3.6.1-1]
	default:
		return fmt.Errorf("packet: WriteAck of %v: only PUBACK, PUBREC, PUBREL and PUBCOMP", t)
	}
	b := appendU16(appendHeader(w.buf[:0], t, flags, 2), id)
	w.keep(b)
	if len(b) > w.maxSize {
		return newError(ErrPacketTooLarge, t, w.version, "packet exceeds the peer's maximum packet size")
	}
	_, err := w.w.Write(b)
	return err
}

// keep retains b's storage for the next packet unless it grew large.
func (w *Writer) keep(b []byte) {
	if cap(b) <= retainBuf {
		w.buf = b[:0]
	}
}
