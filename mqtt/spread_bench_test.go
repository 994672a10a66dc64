//go:build linux

package mqtt_test

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// spreadSessions is the fleet BenchmarkSpread delivers over.
const spreadSessions = 2000

// BenchmarkSpread measures spread delivery, the fleet's everyday load:
// spreadSessions persistent sessions, each subscribed at QoS 1 to its own
// topic, and one publisher sending QoS 1 messages (64-byte payloads,
// pipelined 256 deep) to topic after topic, so each message is routed to
// one session. One op is one message published, delivered and
// acknowledged by its subscriber. The clients are raw descriptors driven
// by system calls from one epoll loop, so -benchmem counts the broker's
// allocations, and cpu-µs/delivery (the process's CPU time: broker and
// clients) is mostly the broker's: a steadier figure than the rate on a
// busy machine.
func BenchmarkSpread(b *testing.B) {
	fleetLoad(b, b.N, func(i int) string { return fmt.Sprintf("fleet/dev/%d", i%spreadSessions) }, b.N)
}

// BenchmarkFanout measures fan-out: the sessions of BenchmarkSpread, each
// also subscribed at QoS 1 to fleet/all, and one publisher sending QoS 1
// messages there, each delivered to every session. One op is one
// delivery; run it a multiple of spreadSessions times (-benchtime
// 40000x), as it publishes whole messages.
func BenchmarkFanout(b *testing.B) {
	msgs := (b.N + spreadSessions - 1) / spreadSessions
	fleetLoad(b, msgs, func(int) string { return "fleet/all" }, msgs*spreadSessions)
}

// fleetLoad connects spreadSessions subscribers, publishes msgs QoS 1
// messages to topic(0), topic(1), ... pipelined 256 deep, and measures
// until the subscribers received and acknowledged deliveries of them.
func fleetLoad(b *testing.B, msgs int, topic func(int) string, deliveries int) {
	s := mqtttest.Start(b, testEngine, nil, mqtt.Options{MaxConnections: spreadSessions + 64})
	sa := loopbackAddr(s.Addr)
	subs := setupStorm(b, sa, 0, spreadSessions, true)
	defer func() {
		for _, fd := range subs {
			syscall.Close(fd)
		}
	}()
	pub := rawDial(b, sa)
	defer syscall.Close(pub)
	connectFd(b, pub, "spread-pub")

	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(ep)
	for _, fd := range subs {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			b.Fatal(err)
		}
	}
	const window = 256
	credits := make(chan struct{}, window)
	for range window {
		credits <- struct{}{}
	}
	var acked atomic.Int64
	ackErr := make(chan error, 1)
	go func() { ackErr <- readPubacks(pub, credits, &acked) }()

	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	sent := make(chan error, 1)
	go func() { sent <- publishSpread(pub, msgs, topic, credits) }()
	delivered, err := receiveSpread(ep, deliveries)
	if err != nil {
		b.Fatal(err)
	}
	elapsed, used := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
	if delivered != deliveries {
		b.Fatalf("%d of %d deliveries", delivered, deliveries)
	}
	b.ReportMetric(float64(deliveries)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(used.Microseconds())/float64(deliveries), "cpu-µs/delivery")
}

// connectFd sends a clean-session CONNECT on fd and reads its CONNACK.
func connectFd(b *testing.B, fd int, client string) {
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: client, CleanStart: true}).Append(nil, packet.V311)
	if _, err := syscall.Write(fd, out); err != nil {
		b.Fatal(err)
	}
	var buf [4]byte
	for n := 0; n < 4; {
		m, err := syscall.Read(fd, buf[n:])
		if err != nil || m == 0 {
			b.Fatalf("CONNACK: %v", err)
		}
		n += m
	}
	if buf[0] != 0x20 || buf[3] != 0 {
		b.Fatalf("CONNACK % x", buf)
	}
}

// publishSpread sends n QoS 1 PUBLISHes to topic(0), topic(1), ... in
// turn, taking a credit for each; PUBACKs return them.
func publishSpread(fd, n int, topic func(int) string, credits chan struct{}) error {
	payload := make([]byte, 64)
	var out []byte
	for i := range n {
		<-credits
		p := &packet.Publish{QoS: packet.QoS1, PacketID: uint16(i%65535 + 1),
			Topic: topic(i), Payload: payload}
		out, _ = p.Append(out[:0], packet.V311)
		if _, err := syscall.Write(fd, out); err != nil {
			return err
		}
	}
	return nil
}

// readPubacks returns a credit for each PUBACK read from fd, until fd
// closes.
func readPubacks(fd int, credits chan struct{}, acked *atomic.Int64) error {
	var buf [4096]byte
	have := 0
	for {
		m, err := syscall.Read(fd, buf[have:])
		if err != nil || m == 0 {
			return err
		}
		have += m
		k := 0
		for ; have-k >= 4; k += 4 {
			if buf[k] != 0x40 {
				return fmt.Errorf("publisher got % x, want a PUBACK", buf[k:k+4])
			}
			acked.Add(1)
			credits <- struct{}{}
		}
		have = copy(buf[:], buf[k:have])
	}
}

// receiveSpread reads the subscribers' PUBLISHes from the descriptors in
// ep, answers each with its PUBACK, and returns once n arrived or none
// came for 30 s.
func receiveSpread(ep, n int) (int, error) {
	events := make([]syscall.EpollEvent, 128)
	pending := map[int32][]byte{} // partial packets, by descriptor
	var buf [8192]byte
	got := 0
	for got < n {
		k, err := syscall.EpollWait(ep, events, 30000)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return got, err
		}
		if k == 0 {
			return got, fmt.Errorf("no delivery for 30 s after %d of %d", got, n)
		}
		for _, ev := range events[:k] {
			fd := int(ev.Fd)
			m, err := syscall.Read(fd, buf[:])
			if err != nil || m == 0 {
				return got, fmt.Errorf("subscriber descriptor %d: read: %w", fd, err)
			}
			data := append(pending[ev.Fd], buf[:m]...)
			var acks []byte
			for {
				size, pi, ok := rawPublish(data)
				if !ok {
					break
				}
				if size < 0 {
					return got, fmt.Errorf("subscriber got % x, want a QoS 1 PUBLISH", data[:min(len(data), 8)])
				}
				acks = append(acks, 0x40, 2, byte(pi>>8), byte(pi))
				data = data[size:]
				got++
			}
			if len(data) > 0 {
				pending[ev.Fd] = append([]byte(nil), data...)
			} else {
				delete(pending, ev.Fd)
			}
			if len(acks) > 0 {
				if _, err := syscall.Write(fd, acks); err != nil {
					return got, err
				}
			}
		}
	}
	return got, nil
}

// rawPublish parses one QoS 1 PUBLISH at the start of b: its size in
// bytes and packet id; ok is false while b holds less than one packet, and
// size is -1 for anything else.
func rawPublish(b []byte) (size int, pi uint16, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	if b[0]&0xF0 != 0x30 || (b[0]>>1)&3 != 1 {
		return -1, 0, true
	}
	rl, n := binary.Uvarint(b[1:])
	if n <= 0 {
		return 0, 0, false // length not all here yet
	}
	size = 1 + n + int(rl)
	if len(b) < size {
		return 0, 0, false
	}
	body := b[1+n : size]
	tl := int(binary.BigEndian.Uint16(body))
	return size, binary.BigEndian.Uint16(body[2+tl:]), true
}
