package packet

import (
	"errors"
	"io"
	"sync"
)

// Reader decodes packets from one connection, one at a time. It reads
// exactly the bytes of each packet from the underlying io.Reader, never
// beyond; wrap a connection in a bufio.Reader for fewer system calls (the
// Reader then uses its ReadByte for the fixed header). A Reader is used by
// one goroutine; only Publish.Release may be called from others.
// ReadPacket blocks in the underlying reader and takes no context, since a
// context cannot interrupt an io.Reader: the connection's owner bounds it
// with a read deadline or by closing the connection.
type Reader struct {
	src     io.Reader
	br      io.ByteReader
	version Version
	maxSize int
	// noPayloadCheck turns off the UTF-8 check of payloads marked as such.
	noPayloadCheck bool
	in             *interner
	scratch        []byte
	one            [1]byte

	mu   sync.Mutex
	free []*Publish

	// reuseAcks says ReadPacket decodes acknowledgements into ack (see
	// SetReuseAcks). The four kinds share their fields, so one packet's
	// room serves them all, converted; it is made at the first and let go
	// by ReleaseAcks.
	reuseAcks bool
	ack       *Puback
}

const (
	// readChunk is the most a Reader allocates for a packet body ahead of
	// the bytes arriving.
	readChunk = 64 << 10
	// connectChunk is readChunk before the protocol level is known.
	connectChunk = 1 << 10
	// retainBuf is the largest buffer a Reader keeps for reuse; larger
	// ones, needed by rare large packets, are left to the collector.
	retainBuf = 64 << 10
	// maxFree bounds the released PUBLISH packets kept for reuse.
	maxFree = 64
	// retainSlice bounds the user property and subscription identifier
	// slices a kept packet holds on to.
	retainSlice = 64
)

// NewReader returns a Reader over r that rejects packets larger than
// maxPacketSize bytes (the whole packet, fixed header included, as the 5.0
// Maximum Packet Size counts it). Zero, negative or over-large values mean
// the protocol's own limit, MaxPacketSize. The Reader has no protocol level
// until it decodes a CONNECT or SetVersion is called.
func NewReader(r io.Reader, maxPacketSize int) *Reader {
	rd := &Reader{src: r}
	rd.br, _ = r.(io.ByteReader)
	rd.SetMaxPacketSize(maxPacketSize)
	return rd
}

// SetReuseAcks makes ReadPacket return PUBACK, PUBREC, PUBREL and PUBCOMP
// packets that the Reader owns, with no allocation past the first: each is
// valid only until the next ReadPacket, which overwrites it. For a caller
// that is done with a packet before it reads the next, such as a
// connection's read loop; one that keeps packets must leave it off.
// Turning it off releases the Reader's packet as ReleaseAcks does.
func (r *Reader) SetReuseAcks(on bool) {
	r.reuseAcks = on
	if !on {
		r.ReleaseAcks()
	}
}

// ReleaseAcks lets go of the Reader's own acknowledgement (see
// SetReuseAcks), for a connection that goes idle: the packet goes back to
// a pool shared by every Reader, so an idle connection holds none and one
// woken for a single acknowledgement at a time (a device of a fleet
// acknowledging each delivery) allocates none either. The packet last
// returned must no longer be in use.
func (r *Reader) ReleaseAcks() {
	if r.ack != nil {
		*r.ack = Puback{}
		acks.Put(r.ack)
		r.ack = nil
	}
}

// acks holds the acknowledgement packets of idle Readers (see
// ReleaseAcks).
var acks = sync.Pool{New: func() any { return new(Puback) }}

// ownAck decodes an acknowledgement into the Reader's own packet (see
// SetReuseAcks); nil for another type.
func (r *Reader) ownAck(d *decoder) Packet {
	codes := pubackCodes
	switch d.t {
	case TypePuback, TypePubrec:
	case TypePubrel, TypePubcomp:
		codes = pubrelCodes
	default:
		return nil
	}
	if r.ack == nil {
		r.ack, _ = acks.Get().(*Puback)
	}
	a := r.ack
	*a = Puback{}
	decodeAck(d, codes, &a.PacketID, &a.ReasonCode, &a.Properties)
	switch d.t {
	case TypePubrec:
		return (*Pubrec)(a)
	case TypePubrel:
		return (*Pubrel)(a)
	case TypePubcomp:
		return (*Pubcomp)(a)
	}
	return a
}

// SetMaxPacketSize changes the size limit (see NewReader).
func (r *Reader) SetMaxPacketSize(n int) {
	if n <= 0 || n > MaxPacketSize {
		n = MaxPacketSize
	}
	r.maxSize = n
}

// SetVersion fixes the protocol level used to decode every packet but
// CONNECT, which carries its own.
func (r *Reader) SetVersion(v Version) {
	r.version = v
}

// Version returns the protocol level in force, or 0 before any.
func (r *Reader) Version() Version { return r.version }

// SetPayloadFormatCheck turns on (the default) or off the check that a
// payload whose Payload Format Indicator is 1 is valid UTF-8. With it off
// the broker can call Publish.CheckPayloadFormat and answer a QoS 1 or 2
// message with a 0x99 acknowledgement instead of a DISCONNECT.
func (r *Reader) SetPayloadFormatCheck(on bool) { r.noPayloadCheck = !on }

// ReadPacket reads and decodes the next packet. Before the Reader has a
// protocol level only CONNECT is accepted; the first CONNECT decoded sets
// the level. A validation failure is a *Error (the connection should be
// closed, after a DISCONNECT or CONNACK with its code where the protocol
// allows); io.EOF means the connection ended between packets; any other
// error comes from the underlying reader.
func (r *Reader) ReadPacket() (Packet, error) {
	first, err := r.readByte()
	if err != nil {
		return nil, err
	}
	t := Type(first >> 4)
	flags := first & 0x0f
	v := r.version
	remaining, lenBytes, err := r.readRemainingLength(t, v)
	if err != nil {
		return nil, err
	}
	if err := checkHeader(t, flags, v); err != nil {
		return nil, err
	}
	if 1+lenBytes+remaining > r.maxSize {
		return nil, newError(ErrPacketTooLarge, t, v, "packet exceeds the maximum packet size")
	}
	if t == TypePublish {
		return r.readPublish(flags, remaining)
	}
	body, err := r.readBody(r.scratch[:0], remaining)
	if err != nil {
		return nil, err
	}
	if cap(body) <= retainBuf {
		r.scratch = body[:0]
	}
	d := decoder{buf: body, t: t, v: v, in: r.in}
	if r.reuseAcks {
		if p := r.ownAck(&d); p != nil || d.err != nil {
			if d.err != nil {
				return nil, d.err
			}
			return p, nil
		}
	}
	p := decodeBody(&d, flags, !r.noPayloadCheck)
	if d.err != nil {
		return nil, d.err
	}
	if c, ok := p.(*Connect); ok && r.version == 0 {
		r.version = c.Version
	}
	return p, nil
}

func (r *Reader) readPublish(flags byte, remaining int) (Packet, error) {
	p := r.getPublish()
	body, err := r.readBody(p.buf[:0], remaining)
	if err != nil {
		r.putPublish(p)
		return nil, err
	}
	p.buf = body
	if r.in == nil {
		// Made with the first PUBLISH: a connection that only receives
		// (most of a fleet) never needs one.
		r.in = newInterner()
	}
	d := decoder{buf: body, t: TypePublish, v: r.version, alias: true, in: r.in}
	p.decode(&d, flags, !r.noPayloadCheck)
	if d.err != nil {
		r.putPublish(p)
		return nil, d.err
	}
	return p, nil
}

func (r *Reader) readByte() (byte, error) {
	if r.br != nil {
		return r.br.ReadByte()
	}
	_, err := io.ReadFull(r.src, r.one[:])
	return r.one[0], err
}

// readRemainingLength reads the fixed header's Variable Byte Integer.
func (r *Reader) readRemainingLength(t Type, v Version) (n, size int, err error) {
	for i := 0; i < 4; i++ {
		b, err := r.readByte()
		if err != nil {
			return 0, 0, unexpected(err)
		}
		n |= int(b&0x7f) << (7 * i)
		if b < 0x80 {
			if b == 0 && i > 0 && v == V5 {
				return 0, 0, newError(ErrMalformed, t, v, "remaining length not in its shortest form")
			}
			return n, i + 1, nil
		}
	}
	return 0, 0, newError(ErrMalformed, t, v, "remaining length longer than 4 bytes")
}

// unexpected turns an end of stream inside a packet into ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readBody reads n bytes into buf (reusing its capacity). When buf is too
// small it grows with the data, at most doubling past what arrived, so a
// peer announcing a large packet and sending nothing costs little memory.
func (r *Reader) readBody(buf []byte, n int) ([]byte, error) {
	if cap(buf) >= n {
		buf = buf[:n]
		if _, err := io.ReadFull(r.src, buf); err != nil {
			return nil, unexpected(err)
		}
		return buf, nil
	}
	// Before the CONNECT is read the peer has proven nothing: a socket
	// that announces a large CONNECT and stalls gets a small buffer.
	floor := readChunk
	if r.version == 0 {
		floor = connectChunk
	}
	got := 0
	buf = buf[:cap(buf)]
	for got < n {
		if got == len(buf) {
			nb := make([]byte, min(n, max(2*len(buf), floor)))
			copy(nb, buf[:got])
			buf = nb
		}
		k, err := io.ReadFull(r.src, buf[got:])
		got += k
		if err != nil {
			return nil, unexpected(err)
		}
	}
	return buf[:n], nil
}

// checkHeader applies the rules of the fixed header's first byte.
func checkHeader(t Type, flags byte, v Version) error {
	switch {
	case t == 0:
		return newError(ErrMalformed, t, v, "reserved packet type 0")
	case t == TypeAuth && v == V311:
		return newError(ErrMalformed, t, v, "packet type 15 is reserved in 3.1.1")
	case v == 0 && t != TypeConnect:
		return newError(ErrProtocol, t, v, "first packet is not CONNECT")
	case t == TypePublish:
		return nil // flags carry DUP, QoS and RETAIN, checked with the body
	case t == TypePubrel || t == TypeSubscribe || t == TypeUnsubscribe:
		if flags != 2 {
			return newError(ErrMalformed, t, v, "fixed header flags are not 0010") // [MQTT-2.1.3-1]
		}
	case flags != 0:
		return newError(ErrMalformed, t, v, "fixed header flags are not 0000") // [MQTT-2.1.3-1]
	}
	return nil
}

// decodeBody decodes every packet type but a Reader's PUBLISH.
func decodeBody(d *decoder, flags byte, checkPayload bool) Packet {
	switch d.t {
	case TypeConnect:
		if c := decodeConnect(d, checkPayload); c != nil {
			return c
		}
	case TypeConnack:
		if c := decodeConnack(d); c != nil {
			return c
		}
	case TypePublish:
		p := &Publish{}
		p.decode(d, flags, checkPayload)
		if d.err == nil {
			return p
		}
	case TypePuback:
		p := &Puback{}
		decodeAck(d, pubackCodes, &p.PacketID, &p.ReasonCode, &p.Properties)
		return p
	case TypePubrec:
		p := &Pubrec{}
		decodeAck(d, pubackCodes, &p.PacketID, &p.ReasonCode, &p.Properties)
		return p
	case TypePubrel:
		p := &Pubrel{}
		decodeAck(d, pubrelCodes, &p.PacketID, &p.ReasonCode, &p.Properties)
		return p
	case TypePubcomp:
		p := &Pubcomp{}
		decodeAck(d, pubrelCodes, &p.PacketID, &p.ReasonCode, &p.Properties)
		return p
	case TypeSubscribe:
		if s := decodeSubscribe(d); s != nil {
			return s
		}
	case TypeSuback:
		if s := decodeSuback(d); s != nil {
			return s
		}
	case TypeUnsubscribe:
		if u := decodeUnsubscribe(d); u != nil {
			return u
		}
	case TypeUnsuback:
		if u := decodeUnsuback(d); u != nil {
			return u
		}
	case TypePingreq:
		d.end()
		return &Pingreq{}
	case TypePingresp:
		d.end()
		return &Pingresp{}
	case TypeDisconnect:
		if p := decodeDisconnect(d); p != nil {
			return p
		}
	case TypeAuth:
		if p := decodeAuth(d); p != nil {
			return p
		}
	}
	return nil
}

// Decode decodes the packet at the start of data under protocol level v
// (0 accepts only CONNECT) and returns it with the number of bytes it
// spans. Slices in the result, such as a PUBLISH payload, point into data;
// strings are copies. A packet longer than maxPacketSize (see NewReader)
// fails with ErrPacketTooLarge; data that ends inside the packet returns
// io.ErrUnexpectedEOF. The payload format check is on.
func Decode(data []byte, v Version, maxPacketSize int) (Packet, int, error) {
	if maxPacketSize <= 0 || maxPacketSize > MaxPacketSize {
		maxPacketSize = MaxPacketSize
	}
	if len(data) == 0 {
		return nil, 0, io.ErrUnexpectedEOF
	}
	t := Type(data[0] >> 4)
	flags := data[0] & 0x0f
	remaining, i := 0, 1
	for ; ; i++ {
		if i > 4 {
			return nil, 0, newError(ErrMalformed, t, v, "remaining length longer than 4 bytes")
		}
		if i >= len(data) {
			return nil, 0, io.ErrUnexpectedEOF
		}
		b := data[i]
		remaining |= int(b&0x7f) << (7 * (i - 1))
		if b < 0x80 {
			if b == 0 && i > 1 && v == V5 {
				return nil, 0, newError(ErrMalformed, t, v, "remaining length not in its shortest form")
			}
			i++
			break
		}
	}
	if err := checkHeader(t, flags, v); err != nil {
		return nil, 0, err
	}
	size := i + remaining
	if size > maxPacketSize {
		return nil, 0, newError(ErrPacketTooLarge, t, v, "packet exceeds the maximum packet size")
	}
	if size > len(data) {
		return nil, 0, io.ErrUnexpectedEOF
	}
	d := decoder{buf: data[i:size:size], t: t, v: v, alias: true}
	p := decodeBody(&d, flags, true)
	if d.err != nil {
		return nil, 0, d.err
	}
	return p, size, nil
}

// getPublish takes a released packet from the free list, or a new one.
func (r *Reader) getPublish() *Publish {
	r.mu.Lock()
	var p *Publish
	if n := len(r.free); n > 0 {
		p = r.free[n-1]
		r.free[n-1] = nil
		r.free = r.free[:n-1]
	}
	r.mu.Unlock()
	if p == nil {
		p = &Publish{}
	}
	p.owner, p.self = r, p
	return p
}

// putPublish clears p and keeps it for reuse when there is room. The
// cleared slices keep their capacity but drop their contents, so a kept
// packet holds no caller data alive.
func (r *Reader) putPublish(p *Publish) {
	buf := p.buf[:0]
	if cap(buf) > retainBuf {
		buf = nil
	}
	props := p.Properties
	clear(props.User)
	props.Reset()
	if cap(props.User) > retainSlice {
		props.User = nil
	}
	if cap(props.SubscriptionIDs) > retainSlice {
		props.SubscriptionIDs = nil
	}
	*p = Publish{buf: buf, Properties: props}
	r.mu.Lock()
	if len(r.free) < maxFree {
		r.free = append(r.free, p)
	}
	r.mu.Unlock()
}

// Reset makes r read from src from now on, keeping its protocol level,
// size limit and caches: for a connection that moves to a larger buffer
// once its CONNECT is read. Bytes src does not hold are lost, so the
// caller passes on what the old source had buffered.
func (r *Reader) Reset(src io.Reader) {
	r.src = src
	r.br, _ = src.(io.ByteReader)
}
