package mqttbench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// BenchmarkLeanClientAgreement runs the benchmark's client and a lean one
// against the same mosquitto at window 1, in alternating rounds: the lean
// client is one goroutine per connection that writes a PUBLISH encoded
// once (its packet id patched in place) and reads each acknowledgement
// with one read of its four bytes, with a subscriber just as bare, both on
// blocking sockets as the benchmark's client at few connections. Their
// msgs/s should agree: a client whose own cost is not small next to the
// broker's would report its own speed, not the broker's.
//
//	go test -run '^$' -bench LeanClientAgreement -benchtime 1x ./bench/mqttbench/
func BenchmarkLeanClientAgreement(b *testing.B) {
	target := mosquittoPeer(b)
	const rounds, round = 3, 2 * time.Second
	for _, qos := range []packet.QoS{packet.QoS1, packet.QoS2} {
		b.Run(fmt.Sprintf("qos%d-w1", qos), func(b *testing.B) {
			ctx := b.Context()
			var lean, ours, leanCPU, oursCPU float64
			for range b.N {
				for r := range rounds {
					dir := b.TempDir()
					inst, err := target.start(ctx, dir, slog.Default())
					if err != nil {
						b.Fatal(err)
					}
					rate, cpu, err := leanRound(ctx, inst.addr, qos, r, round)
					if serr := inst.stop(); err == nil {
						err = serr
					}
					if err != nil {
						b.Fatal(err)
					}
					lean += rate / rounds
					leanCPU += cpu / rounds

					res := runPoint(ctx, Config{Duration: round, Warmup: round / 5, Logger: slog.Default(), DrainTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second},
						target, Load{QoS: byte(qos), Window: 1, Conns: 1}, b.TempDir(), uint32(r+1))
					if !res.Clean() {
						b.Fatalf("benchmark client: %+v", res)
					}
					ours += res.PerSecond / rounds
					oursCPU += res.ClientMicros / rounds
				}
			}
			b.ReportMetric(lean, "lean-msgs/s")
			b.ReportMetric(ours, "bench-msgs/s")
			b.ReportMetric(ours/lean, "bench/lean")
			b.ReportMetric(leanCPU, "lean-client-µs/msg")
			b.ReportMetric(oursCPU, "bench-client-µs/msg")
			fmt.Fprintf(os.Stderr, "qos%d window 1 on mosquitto: lean client %.0f msgs/s (%.1f µs CPU each), benchmark client %.0f msgs/s (%.1f µs): %.2fx\n",
				qos, lean, leanCPU, ours, oursCPU, ours/lean)
		})
	}
}

// leanRound publishes at window 1 for d (after a fifth of it unmeasured)
// and returns msgs/s and this process's CPU µs per message.
func leanRound(ctx context.Context, addr string, qos packet.QoS, run int, d time.Duration) (rate, cpuMicros float64, err error) {
	// A processor to spare while both readers wait in the kernel, as the
	// benchmark's client has (see runPoint).
	if runtime.GOMAXPROCS(0) < 3 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	}
	topic := fmt.Sprintf("lean/%d", run)
	sub, err := leanConnect(ctx, addr, fmt.Sprintf("lean-sub-%d", run))
	if err != nil {
		return 0, 0, err
	}
	defer sub.Close()
	if err := leanSubscribe(sub, topic, qos); err != nil {
		return 0, 0, err
	}
	var got atomic.Int64
	subDone := make(chan error, 1)
	go func() { subDone <- leanSubscriber(sub, &got) }()

	pub, err := leanConnect(ctx, addr, fmt.Sprintf("lean-pub-%d", run))
	if err != nil {
		return 0, 0, err
	}
	defer pub.Close()
	msg := encode(&packet.Publish{Topic: topic, QoS: qos, PacketID: 1, Payload: make([]byte, PayloadSize)})
	// The packet id is the two bytes after the topic.
	idAt := len(msg) - PayloadSize - 2
	rel := []byte{0x62, 2, 0, 0}
	ack := make([]byte, 4)
	warm := time.Now().Add(d / 5)
	end := warm.Add(d)
	var n int
	var cpu0 time.Duration
	measuring := false
	for id := uint16(1); ; id++ {
		if id == 0 {
			id = 1
		}
		now := time.Now()
		if !measuring && now.After(warm) {
			measuring, n, cpu0 = true, 0, proc.SelfCPU()
			warm = now
		}
		if now.After(end) {
			cpu := proc.SelfCPU() - cpu0
			rate = float64(n) / now.Sub(warm).Seconds()
			cpuMicros = float64(cpu.Microseconds()) / float64(n)
			break
		}
		binary.BigEndian.PutUint16(msg[idAt:], id)
		if _, err := pub.Write(msg); err != nil {
			return 0, 0, err
		}
		if _, err := io.ReadFull(pub, ack); err != nil {
			return 0, 0, err
		}
		if qos == packet.QoS2 {
			binary.BigEndian.PutUint16(rel[2:], id)
			if _, err := pub.Write(rel); err != nil {
				return 0, 0, err
			}
			if _, err := io.ReadFull(pub, ack); err != nil {
				return 0, 0, err
			}
		}
		n++
	}
	// Every message reached the subscriber before it ends.
	deadline := time.Now().Add(10 * time.Second)
	sent := int64(n)
	for got.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() < sent {
		return 0, 0, fmt.Errorf("lean subscriber got %d of at least %d", got.Load(), sent)
	}
	sub.Close()
	if err := <-subDone; err != nil && !errors.Is(err, net.ErrClosed) {
		return 0, 0, err
	}
	return rate, cpuMicros, nil
}

func encode(p packet.Packet) []byte {
	var buf bytesWriter
	w := packet.NewWriter(&buf, packet.V311)
	if err := w.WritePacket(p); err != nil {
		panic(err)
	}
	return buf
}

type bytesWriter []byte

func (b *bytesWriter) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

func leanConnect(ctx context.Context, addr, id string) (net.Conn, error) {
	nc, err := dialBlocking(ctx, addr)
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(encode(&packet.Connect{CleanStart: true, ClientID: id, KeepAlive: keepAlive})); err != nil {
		nc.Close()
		return nil, err
	}
	connack := make([]byte, 4)
	if _, err := io.ReadFull(nc, connack); err != nil || connack[0] != 0x20 || connack[3] != 0 {
		nc.Close()
		return nil, fmt.Errorf("CONNACK % x: %w", connack, err)
	}
	return nc, nil
}

func leanSubscribe(nc net.Conn, topic string, qos packet.QoS) error {
	s := encode(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: topic, QoS: qos}}})
	if _, err := nc.Write(s); err != nil {
		return err
	}
	suback := make([]byte, 5)
	if _, err := io.ReadFull(nc, suback); err != nil || suback[0] != 0x90 || suback[4] != byte(qos) {
		return fmt.Errorf("SUBACK % x: %w", suback, err)
	}
	return nil
}

// leanSubscriber acknowledges what it is sent and counts the PUBLISHes.
func leanSubscriber(nc net.Conn, got *atomic.Int64) error {
	br := bufio.NewReaderSize(nc, 64<<10)
	body := make([]byte, 0, 256)
	reply := []byte{0, 2, 0, 0}
	for {
		h, err := br.ReadByte()
		if err != nil {
			return err
		}
		var size, shift int
		for {
			c, err := br.ReadByte()
			if err != nil {
				return err
			}
			size |= int(c&0x7f) << shift
			shift += 7
			if c < 0x80 {
				break
			}
		}
		body = body[:size]
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		var id []byte
		switch {
		case h>>4 == 3: // PUBLISH
			got.Add(1)
			qos := h >> 1 & 3
			if qos == 0 {
				continue
			}
			tl := int(binary.BigEndian.Uint16(body))
			id = body[2+tl : 4+tl]
			reply[0] = 0x40 // PUBACK
			if qos == 2 {
				reply[0] = 0x50 // PUBREC
			}
		case h == 0x62: // PUBREL
			id = body[:2]
			reply[0] = 0x70 // PUBCOMP
		default:
			continue
		}
		copy(reply[2:], id)
		if _, err := nc.Write(reply); err != nil {
			return err
		}
	}
}
