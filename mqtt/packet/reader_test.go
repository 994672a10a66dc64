package packet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestReaderStream reads a CONNECT and then a mixed stream through one
// Reader, checking that it adopts the CONNECT's level, stops exactly at
// each packet's end, and reports io.EOF between packets.
func TestReaderStream(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		var stream []byte
		stream = append(stream, encode(t, &Connect{CleanStart: true, ClientID: "c"}, v)...)
		var want []Packet
		for _, p := range samples() {
			if _, ok := p.(*Connect); ok || !encodable(p, v) {
				continue
			}
			stream = append(stream, encode(t, p, v)...)
			want = append(want, downgrade(p, v))
		}
		cr := &countingReader{r: bytes.NewReader(stream)}
		r := NewReader(cr, 0)
		if _, err := r.ReadPacket(); err != nil {
			t.Fatal(err)
		}
		if r.Version() != v {
			t.Fatalf("reader level %v after CONNECT, want %v", r.Version(), v)
		}
		for i, w := range want {
			p, err := r.ReadPacket()
			if err != nil {
				t.Fatalf("%v: packet %d: %v", v, i, err)
			}
			if got := canon(p); !equalPackets(got, w) {
				t.Fatalf("%v: packet %d:\n got %#v\nwant %#v", v, i, got, w)
			}
		}
		if cr.n != len(stream) {
			t.Fatalf("consumed %d of %d", cr.n, len(stream))
		}
		if _, err := r.ReadPacket(); !errors.Is(err, io.EOF) {
			t.Fatalf("at end: %v", err)
		}
	}
}

// TestReaderStopsAtPacketEnd checks that a Reader over a plain io.Reader
// leaves the bytes after a packet unread, so a caller can hand the
// connection to something else (a WebSocket frame, a TLS upgrade).
func TestReaderStopsAtPacketEnd(t *testing.T) {
	pkt := encode(t, &Publish{Topic: "a", Payload: []byte("xyz")}, V5)
	src := bytes.NewReader(append(append([]byte{}, pkt...), "TRAILER"...))
	r := NewReader(src, 0)
	r.SetVersion(V5)
	if _, err := r.ReadPacket(); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(src)
	if string(rest) != "TRAILER" {
		t.Fatalf("left %q", rest)
	}
}

func TestSecondConnectKeepsLevel(t *testing.T) {
	var stream []byte
	stream = append(stream, encode(t, &Connect{CleanStart: true, ClientID: "c"}, V5)...)
	stream = append(stream, encode(t, &Connect{CleanStart: true, ClientID: "c"}, V311)...)
	r := NewReader(bytes.NewReader(stream), 0)
	for range 2 {
		if _, err := r.ReadPacket(); err != nil {
			t.Fatal(err)
		}
	}
	if r.Version() != V5 {
		t.Fatalf("level changed to %v by a second CONNECT", r.Version())
	}
}

func TestPacketTooLarge(t *testing.T) {
	pkt := encode(t, &Publish{Topic: "a", Payload: make([]byte, 100)}, V5)
	for _, max := range []int{len(pkt) - 1, 10} {
		cr := &countingReader{r: bytes.NewReader(pkt)}
		r := NewReader(cr, max)
		r.SetVersion(V5)
		_, err := r.ReadPacket()
		wantCodecError(t, err, ErrPacketTooLarge, PacketTooLarge)
		if cr.n > 5 {
			t.Fatalf("read %d bytes of a packet it rejected by its header", cr.n)
		}
		_, _, err = Decode(pkt, V5, max)
		wantCodecError(t, err, ErrPacketTooLarge, PacketTooLarge)
	}
	r := NewReader(bytes.NewReader(pkt), len(pkt))
	r.SetVersion(V5)
	if _, err := r.ReadPacket(); err != nil {
		t.Fatalf("packet of exactly the maximum size: %v", err)
	}
}

// allocatedBy returns the bytes allocated while f runs.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestHugeRemainingLengthDoesNotAllocate announces the largest packet the
// protocol allows and then sends only a little of it: the Reader must not
// allocate for what never arrived.
func TestHugeRemainingLengthDoesNotAllocate(t *testing.T) {
	header := []byte{0x30, 0xff, 0xff, 0xff, 0x7f}
	for _, sent := range []int{0, 10, 300 << 10} {
		in := append(append([]byte{}, header...), make([]byte, sent)...)
		var err error
		n := allocatedBy(func() {
			r := NewReader(bytes.NewReader(in), 0)
			r.SetVersion(V5)
			_, err = r.ReadPacket()
		})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("sent %d: %v", sent, err)
		}
		if limit := uint64(4*sent + 2*readChunk + 64<<10); n > limit {
			t.Fatalf("sent %d bytes of a 256 MiB packet: allocated %d bytes (limit %d)", sent, n, limit)
		}
	}
}

// TestPublishReuse checks the release cycle: a released packet and its
// buffer serve the next PUBLISH, copies cannot release the original, and a
// steady stream of PUBLISH packets to one topic allocates nothing.
func TestPublishReuse(t *testing.T) {
	pkt := encode(t, &Publish{Topic: "devices/1/state", QoS: QoS1, PacketID: 1, Payload: make([]byte, 512)}, V5)
	src := &repeatReader{pkt: pkt}
	r := NewReader(bufio.NewReader(src), 0)
	r.SetVersion(V5)
	read := func() *Publish {
		p, err := r.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		return p.(*Publish)
	}
	p1 := read()
	copyOf := *p1
	copyOf.Release() // a copy owns nothing
	p2 := read()
	if p2 == p1 {
		t.Fatal("unreleased packet handed out again")
	}
	p1.Release()
	p1.Release() // harmless
	p3 := read()
	if p3 != p1 {
		t.Fatal("released packet not reused")
	}
	if p3.Topic != "devices/1/state" || len(p3.Payload) != 512 {
		t.Fatalf("reused packet decoded wrong: %q %d", p3.Topic, len(p3.Payload))
	}
	p2.Release()
	p3.Release()
	// A packet that needed large slices does not keep them in the free list.
	var big Publish
	for i := range 1000 {
		big.Properties.AddUser("k", "v")
		big.Properties.AddSubscriptionID(uint32(i + 1))
	}
	r.putPublish(&big)
	if cap(big.Properties.User) != 0 || cap(big.Properties.SubscriptionIDs) != 0 || big.buf != nil {
		t.Fatal("released packet kept oversized slices")
	}
	allocs := testing.AllocsPerRun(1000, func() { read().Release() })
	if allocs != 0 {
		t.Fatalf("%.1f allocations per PUBLISH in steady state", allocs)
	}
}

// TestReleaseFromOtherGoroutines exercises the free list under the race
// detector: packets are released by workers while the Reader keeps going,
// and each packet's payload must be intact until its release.
func TestReleaseFromOtherGoroutines(t *testing.T) {
	var stream []byte
	const n = 2000
	for i := range n {
		stream = append(stream, encode(t, &Publish{Topic: "t", QoS: QoS1, PacketID: uint16(i + 1),
			Payload: bytes.Repeat([]byte{byte(i)}, 64)}, V311)...)
	}
	r := NewReader(bytes.NewReader(stream), 0)
	r.SetVersion(V311)
	work := make(chan *Publish, 16)
	var wg sync.WaitGroup
	var bad sync.Map
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				want := byte(p.PacketID - 1)
				for _, c := range p.Payload {
					if c != want {
						bad.Store(p.PacketID, c)
					}
				}
				p.Release()
			}
		}()
	}
	for range n {
		p, err := r.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		work <- p.(*Publish)
	}
	close(work)
	wg.Wait()
	bad.Range(func(k, v any) bool {
		t.Errorf("packet %v saw a byte %v from another packet", k, v)
		return true
	})
}

// TestInternedStringsAreIndependent checks that shared strings never
// change under a caller when later packets reuse the buffer.
func TestInternedStringsAreIndependent(t *testing.T) {
	var stream []byte
	for _, topic := range []string{"a/b", "a/c", "a/b"} {
		stream = append(stream, encode(t, &Publish{Topic: topic}, V311)...)
	}
	r := NewReader(bytes.NewReader(stream), 0)
	r.SetVersion(V311)
	var topics []string
	for range 3 {
		p, err := r.ReadPacket()
		if err != nil {
			t.Fatal(err)
		}
		topics = append(topics, p.(*Publish).Topic)
		p.(*Publish).Release()
	}
	if topics[0] != "a/b" || topics[1] != "a/c" || topics[2] != "a/b" {
		t.Fatalf("topics %q", topics)
	}
}

func TestPayloadFormatCheckOff(t *testing.T) {
	in := raw(0x32, s("t"), b(0, 1), b(2, 0x01, 1), b(0xff))
	r := NewReader(bytes.NewReader(in), 0)
	r.SetVersion(V5)
	r.SetPayloadFormatCheck(false)
	p, err := r.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	wantCodecError(t, p.(*Publish).CheckPayloadFormat(), ErrPayloadFormatInvalid, PayloadFormatInvalid)
}

func TestWriter(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, V5)
	big := &Publish{Topic: "big", QoS: QoS1, PacketID: 3, Payload: bytes.Repeat([]byte("z"), 3*directPayload)}
	small := &Puback{PacketID: 3, ReasonCode: NoMatchingSubscribers}
	for _, p := range []Packet{big, small, &Pingresp{}} {
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
	}
	want := append(append(encode(t, big, V5), encode(t, small, V5)...), 0xD0, 0)
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatal("writer output differs from Append")
	}
	out.Reset()
	w.SetMaxPacketSize(100)
	wantCodecError(t, w.WritePacket(big), ErrPacketTooLarge, PacketTooLarge)
	wantCodecError(t, w.WritePacket(&Publish{Topic: "t", Payload: make([]byte, 200)}), ErrPacketTooLarge, PacketTooLarge)
	if out.Len() != 0 {
		t.Fatal("an oversized packet was partly written")
	}
	w.SetVersion(V311)
	if err := w.WritePacket(&Auth{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("AUTH under 3.1.1: %v", err)
	}
}

// repeatReader yields the same packet forever.
type repeatReader struct {
	pkt []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.pkt[r.off:])
		n += c
		r.off = (r.off + c) % len(r.pkt)
	}
	return n, nil
}

// TestAllocationBoundedByPacketSize decodes packets built to make the
// decoder allocate as much as possible per input byte (minimal filters and
// user properties) and checks that the memory stays a small multiple of
// the packet's size.
func TestAllocationBoundedByPacketSize(t *testing.T) {
	var subs, users []byte
	for len(subs) < 1<<20 {
		subs = append(subs, 0, 1, 'a', 0)
		users = append(users, 0x26, 0, 0, 0, 0)
	}
	sub := raw(0x82, b(0, 1), subs)
	ack := raw(0x40, b(0, 1, 0), appendVBI(nil, len(users)), users)
	for _, c := range []struct {
		name string
		v    Version
		in   []byte
	}{{"subscribe", V311, sub}, {"puback", V5, ack}} {
		var err error
		n := allocatedBy(func() {
			r := NewReader(bytes.NewReader(c.in), 0)
			r.SetVersion(c.v)
			_, err = r.ReadPacket()
		})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n > uint64(12*len(c.in)) {
			t.Errorf("%s: %d bytes allocated for a %d-byte packet", c.name, n, len(c.in))
		}
		t.Logf("%s: %.1f bytes allocated per packet byte", c.name, float64(n)/float64(len(c.in)))
	}
}

func TestCountsBeforeDecoding(t *testing.T) {
	long := strings.Repeat("x", 300) // lengths above 255 use both length bytes
	var props Properties
	props.SetContentType(long)
	props.AddUser(long, "v")
	props.SetMessageExpiry(7)
	props.AddSubscriptionID(MaxSubscriptionID)
	props.AddUser("", long)
	props.AddSubscriptionID(5)
	props.SetCorrelationData([]byte(long))
	n, _ := props.size(ctxPublish, TypePublish, V5)
	enc := props.appendTo(nil, n)
	if users, ids := countRepeated(enc[vbiLen(n):]); users != 2 || ids != 2 {
		t.Fatalf("counted %d user properties and %d subscription identifiers", users, ids)
	}
	var list []byte
	for _, f := range []string{long, "a", long, ""} {
		list = append(appendStr(list, f), 1)
	}
	if got := countEntries(list, 1); got != 4 {
		t.Fatalf("counted %d filters", got)
	}
}

func TestPublishClone(t *testing.T) {
	src := &Publish{Topic: "t", QoS: QoS1, PacketID: 3, Properties: allProps(ctxPublish), Payload: []byte("payload")}
	r := NewReader(bytes.NewReader(encode(t, src, V5)), 0)
	r.SetVersion(V5)
	p, err := r.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	orig := p.(*Publish)
	c := orig.Clone()
	want := canon(orig)
	orig.Release()
	// Reading another packet reuses the original's memory; the clone
	// must not see it.
	r2 := bytes.NewReader(encode(t, &Publish{Topic: "other", Payload: bytes.Repeat([]byte{'z'}, 200),
		Properties: Properties{User: []UserProperty{{"x", "y"}}}}, V5))
	r.src, r.br = r2, r2
	if _, err := r.ReadPacket(); err != nil {
		t.Fatal(err)
	}
	if !equalPackets(c, want) {
		t.Fatalf("clone changed:\n%#v\n%#v", canon(c), want)
	}
	c.Release() // a clone owns nothing of the Reader's
}

// TestReuseAcks checks that with SetReuseAcks a Reader decodes each kind
// of acknowledgement exactly as without it, under 3.1.1 and 5.0, into one
// packet of its own that every read overwrites, until ReleaseAcks, which
// clears it (it goes to a pool, and must not keep a 5.0 ack's properties).
func TestReuseAcks(t *testing.T) {
	for _, v := range []Version{V311, V5} {
		withProps := func(p *Properties) Properties {
			if v == V5 {
				p.SetReasonString("why")
				p.AddUser("k", "v")
			}
			return *p
		}
		acks := []Packet{
			&Puback{PacketID: 1},
			&Pubrec{PacketID: 2},
			&Pubrel{PacketID: 3},
			&Pubcomp{PacketID: 4},
			&Puback{PacketID: 5, ReasonCode: NoMatchingSubscribers, Properties: withProps(&Properties{})},
			&Pubrec{PacketID: 6, ReasonCode: QuotaExceeded, Properties: withProps(&Properties{})},
			&Pubrel{PacketID: 7, ReasonCode: PacketIdentifierNotFound},
			&Pubcomp{PacketID: 8, ReasonCode: PacketIdentifierNotFound},
		}
		if v == V311 {
			acks = acks[:4]
		}
		var wire []byte
		for _, p := range acks {
			wire = append(wire, encode(t, p, v)...)
		}
		fresh, own := NewReader(bytes.NewReader(wire), 0), NewReader(bytes.NewReader(wire), 0)
		fresh.SetVersion(v)
		own.SetVersion(v)
		own.SetReuseAcks(true)
		var last uintptr
		var lastPkt Packet
		for i := range acks {
			if i == 3 || i == 5 {
				own.ReleaseAcks()
				if !reflect.ValueOf(lastPkt).Elem().IsZero() {
					t.Fatalf("%v #%d: the released packet still holds %#v", v, i, lastPkt)
				}
				last = 0
			}
			want, err := fresh.ReadPacket()
			if err != nil {
				t.Fatalf("%v #%d: %v", v, i, err)
			}
			got, err := own.ReadPacket()
			if err != nil {
				t.Fatalf("%v #%d reused: %v", v, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%v #%d: reused %#v, want %#v", v, i, got, want)
			}
			addr := reflect.ValueOf(got).Pointer()
			if last != 0 && addr != last {
				t.Fatalf("%v #%d: a new %v, want the Reader's own packet", v, i, got.Type())
			}
			last, lastPkt = addr, got
		}
	}
}
