//go:build linux

package mqtt_test

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// BenchmarkIdleSession reports what one connected, idle persistent
// session with one subscription costs the broker: heap bytes, goroutine
// stack bytes and goroutines. The clients are raw descriptors that send a
// CONNECT and a SUBSCRIBE and read the answers with system calls, so they
// add nothing to the Go heap. Run with a fixed count, e.g. -benchtime
// 2000x (at most 4000 are opened). With TIDEMARK_IDLE_HEAPPROFILE set to
// a path, it writes a heap profile there while the sessions are connected
// (read it with go tool pprof -sample_index=inuse_space; -memprofilerate
// 512 makes its figures exact enough to divide by the session count).
func BenchmarkIdleSession(b *testing.B) {
	for _, v := range []packet.Version{packet.V311, packet.V5} {
		b.Run(v.String(), func(b *testing.B) { idleSessions(b, v) })
	}
}

func idleSessions(b *testing.B, v packet.Version) {
	n := min(b.N, 4000)
	s := mqtttest.Start(b, testEngine, nil, mqtt.Options{MaxConnections: n + 16})
	sa := loopbackAddr(s.Addr)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	var buf [256]byte
	b.ResetTimer()
	for i := range n {
		fd := rawDial(b, sa)
		fds = append(fds, fd)
		cp := &packet.Connect{Version: v, ClientID: fmt.Sprintf("idle-%s-%05d", v, i), KeepAlive: 600}
		if v == packet.V5 {
			cp.Properties.SetSessionExpiry(0xFFFFFFFF)
		}
		out, err := cp.Append(nil, v)
		if err != nil {
			b.Fatal(err)
		}
		sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: fmt.Sprintf("dev/%05d/cmd", i), QoS: packet.QoS1}}}
		if out, err = sub.Append(out, v); err != nil {
			b.Fatal(err)
		}
		if _, err := syscall.Write(fd, out); err != nil {
			b.Fatalf("write: %v", err)
		}
		// CONNACK then SUBACK: read until both are in.
		got, want := 0, 4+5
		if v == packet.V5 {
			want = 0 // property lengths vary: read the two fixed headers' lengths
		}
		for read := 0; ; {
			m, err := syscall.Read(fd, buf[read:])
			if err != nil || m == 0 {
				b.Fatalf("read: %v", err)
			}
			read += m
			got = read
			if want > 0 && got >= want {
				break
			}
			if want == 0 && twoPackets(buf[:read]) {
				break
			}
		}
	}
	b.StopTimer()
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if path := os.Getenv("TIDEMARK_IDLE_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heap-B/session")
	b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/float64(n), "stack-B/session")
	b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/float64(n), "goroutines/session")
	b.ReportMetric(0, "ns/op")
}

// writeHeapProfile writes a heap profile of the broker holding the idle
// sessions: what each one costs, by allocation site.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// twoPackets reports whether p holds two whole MQTT packets.
func twoPackets(p []byte) bool {
	for range 2 {
		if len(p) < 2 {
			return false
		}
		size, i := 0, 1
		for shift := 0; i < len(p); i, shift = i+1, shift+7 {
			size |= int(p[i]&0x7f) << shift
			if p[i]&0x80 == 0 {
				break
			}
		}
		if i >= len(p) || len(p) < i+1+size {
			return false
		}
		p = p[i+1+size:]
	}
	return true
}
