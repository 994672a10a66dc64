//go:build linux

package mqtt_test

import (
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
)

// BenchmarkIdleSocket reports what one socket that has not sent CONNECT
// costs the broker: heap bytes and goroutine stack bytes, for a socket
// that sent nothing and for one that sent the first bytes of a CONNECT
// announcing 256 KiB and stalled. The client sockets are raw descriptors,
// so they add nothing to the Go heap. Run with a fixed count, e.g.
// -benchtime 2000x (at most 4000 are opened).
func BenchmarkIdleSocket(b *testing.B) {
	// A CONNECT fixed header with a remaining length of 256 KiB, and the
	// first bytes of its variable header.
	stalled := []byte{0x10, 0x80, 0x80, 0x10, 0x00, 0x04, 'M', 'Q', 'T', 'T', 5}
	b.Run("silent", func(b *testing.B) { idleSockets(b, nil) })
	b.Run("stalled-connect", func(b *testing.B) { idleSockets(b, stalled) })
}

func idleSockets(b *testing.B, send []byte) {
	n := min(b.N, 4000)
	s := mqtttest.Start(b, testEngine, nil, mqtt.Options{MaxConnections: n + 16, ConnectTimeout: time.Hour})
	sa := loopbackAddr(s.Addr)
	br := s.Broker()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	b.ResetTimer()
	for range n {
		fd := rawDial(b, sa)
		fds = append(fds, fd)
		if len(send) > 0 {
			if _, err := syscall.Write(fd, send); err != nil {
				b.Fatalf("write: %v", err)
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for br.Stats().AwaitingConnect < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sockets admitted", br.Stats().AwaitingConnect, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	time.Sleep(500 * time.Millisecond) // for the broker to read what was sent
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heap-B/socket")
	b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/float64(n), "stack-B/socket")
	b.ReportMetric(0, "ns/op")
}

// loopbackAddr is addr ("127.0.0.1:port") as a socket address.
func loopbackAddr(addr string) *syscall.SockaddrInet4 {
	host, port, _ := net.SplitHostPort(addr)
	var sa syscall.SockaddrInet4
	copy(sa.Addr[:], net.ParseIP(host).To4())
	sa.Port, _ = strconv.Atoi(port)
	return &sa
}

// rawDial connects a raw socket to sa: a client that costs the Go heap
// nothing, for the benchmarks that measure the broker's share.
func rawDial(b *testing.B, sa *syscall.SockaddrInet4) int {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatalf("socket: %v", err)
	}
	if err := syscall.Connect(fd, sa); err != nil {
		syscall.Close(fd)
		b.Fatalf("connect: %v", err)
	}
	return fd
}
