//go:build linux

package mqtt_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// BenchmarkExchange measures the broker's cost per QoS 1 and QoS 2
// exchange with one publisher and no subscriber: PUBLISH to PUBACK, or
// PUBLISH, PUBREC, PUBREL to PUBCOMP, 64-byte payloads, one at a time
// (window 1) or pipelined 256 deep, with every commit synced (always)
// and with none (none: the broker's own cost). The publisher is a raw descriptor
// driven by system calls (its own cost per exchange is a few µs of
// system calls), so -benchmem counts the broker's allocations, and
// cpu-µs/msg (the process's CPU time) is mostly the broker's. window16x50
// runs 50 such publishers at window 16 at once.
func BenchmarkExchange(b *testing.B) {
	for _, sync := range []engine.SyncMode{engine.SyncNone, engine.SyncAlways} {
		for _, qos := range []packet.QoS{packet.QoS1, packet.QoS2} {
			for _, window := range []int{1, 256} {
				b.Run(fmt.Sprintf("%s/qos%d/window%d", sync, qos, window), func(b *testing.B) { exchange(b, sync, qos, window, 1) })
			}
			b.Run(fmt.Sprintf("%s/qos%d/window16x50", sync, qos), func(b *testing.B) { exchange(b, sync, qos, 16, 50) })
		}
	}
}

func exchange(b *testing.B, sync engine.SyncMode, qos packet.QoS, window, conns int) {
	s := mqtttest.StartSync(b, testEngine, sync, mqtt.Options{})
	fds := make([]int, conns)
	for i := range fds {
		fds[i] = rawDial(b, loopbackAddr(s.Addr))
		defer syscall.Close(fds[i])
		connectFd(b, fds[i], fmt.Sprintf("exchange-pub-%d", i))
	}
	payload := make([]byte, 64)
	// Each packet id's PUBLISH, encoded once: the client's own cost stays
	// a write and a read.
	pubs := make([][]byte, window)
	for i := range pubs {
		p := &packet.Publish{QoS: qos, PacketID: uint16(i + 1), Topic: "bench/exchange", Payload: payload}
		pubs[i], _ = p.Append(nil, packet.V311)
	}
	done := make(chan error, conns)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	for i, fd := range fds {
		// The exchanges are shared out: the first connections take one
		// more when b.N does not divide.
		n := b.N / conns
		if i < b.N%conns {
			n++
		}
		go func() {
			if n == 0 {
				done <- nil
				return
			}
			var out []byte
			for k := range min(window, n) {
				out = append(out, pubs[k]...)
			}
			if _, err := syscall.Write(fd, out); err != nil {
				done <- err
				return
			}
			done <- exchangeAcks(fd, n, qos, window, pubs)
		}()
	}
	for range fds {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	elapsed, used := time.Since(start), cpuTime()-cpu
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/msg")
}

// exchangeAcks reads the broker's acknowledgements on fd until n exchanges
// completed: it answers a PUBREC with its PUBREL, and each completed
// exchange (PUBACK or PUBCOMP) with the next PUBLISH on its packet id.
// The writes of one read go out in one write.
func exchangeAcks(fd, n int, qos packet.QoS, window int, pubs [][]byte) error {
	var buf [16384]byte
	var out []byte
	have, completed, sent := 0, 0, min(window, n)
	for completed < n {
		m, err := syscall.Read(fd, buf[have:])
		if err != nil || m == 0 {
			return fmt.Errorf("read after %d of %d exchanges: %w", completed, n, err)
		}
		have += m
		k := 0
		out = out[:0]
		for ; have-k >= 4; k += 4 {
			t, pi := buf[k]>>4, uint16(buf[k+2])<<8|uint16(buf[k+3])
			switch {
			case qos == packet.QoS2 && t == 5: // PUBREC
				out = append(out, 0x62, 2, byte(pi>>8), byte(pi))
				continue
			case qos == packet.QoS1 && t == 4, qos == packet.QoS2 && t == 7: // PUBACK, PUBCOMP
			default:
				return fmt.Errorf("got % x", buf[k:k+4])
			}
			completed++
			if sent < n {
				out = append(out, pubs[pi-1]...)
				sent++
			}
		}
		have = copy(buf[:], buf[k:have])
		if len(out) > 0 {
			if _, err := syscall.Write(fd, out); err != nil {
				return err
			}
		}
	}
	return nil
}
