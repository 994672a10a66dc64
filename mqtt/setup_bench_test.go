//go:build linux

package mqtt_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// setupConcurrency is how many clients connect at once in the setup
// benchmarks, as in `tidemark bench fleet`.
const setupConcurrency = 32

// setupRound bounds the sessions connected at once: each takes two
// descriptors of this process.
const setupRound = 4000

// BenchmarkSessionSetup measures a connect storm of persistent MQTT 3.1.1
// sessions on the default engine with every commit synced, 32 clients at
// a time: "setup" is a new session's CONNECT and SUBSCRIBE of two QoS 1
// filters up to the SUBACK, "reconnect" the CONNECT of an existing
// session up to its CONNACK (session present). One op is one session;
// sessions/s is the storm's rate, cpu-µs/session the CPU time the process
// (broker and clients) spent per session. The clients are raw descriptors, so
// -benchmem counts the broker's allocations (and the benchmark's few).
func BenchmarkSessionSetup(b *testing.B) {
	b.Run("setup", func(b *testing.B) {
		s := mqtttest.Start(b, testEngine, nil, mqtt.Options{MaxConnections: setupRound + 64})
		sa := loopbackAddr(s.Addr)
		b.ReportAllocs()
		b.ResetTimer()
		start, cpu := time.Now(), cpuTime()
		var paused, pausedCPU time.Duration
		for done := 0; done < b.N; {
			n := min(b.N-done, setupRound)
			fds := setupStorm(b, sa, done, n, true)
			done += n
			b.StopTimer()
			t, tc := time.Now(), cpuTime()
			dropAll(b, s.Broker(), fds)
			paused, pausedCPU = paused+time.Since(t), pausedCPU+cpuTime()-tc
			b.StartTimer()
		}
		b.ReportMetric(float64(b.N)/(time.Since(start)-paused).Seconds(), "sessions/s")
		b.ReportMetric(float64((cpuTime()-cpu-pausedCPU).Microseconds())/float64(b.N), "cpu-µs/session")
	})
	b.Run("reconnect", func(b *testing.B) {
		s := mqtttest.Start(b, testEngine, nil, mqtt.Options{MaxConnections: setupRound + 64})
		sa := loopbackAddr(s.Addr)
		pool := min(b.N, setupRound)
		dropAll(b, s.Broker(), setupStorm(b, sa, 0, pool, true))
		b.ReportAllocs()
		b.ResetTimer()
		start, cpu := time.Now(), cpuTime()
		var paused, pausedCPU time.Duration
		for done := 0; done < b.N; {
			n := min(b.N-done, pool)
			fds := setupStorm(b, sa, 0, n, false)
			done += n
			b.StopTimer()
			t, tc := time.Now(), cpuTime()
			dropAll(b, s.Broker(), fds)
			paused, pausedCPU = paused+time.Since(t), pausedCPU+cpuTime()-tc
			b.StartTimer()
		}
		b.ReportMetric(float64(b.N)/(time.Since(start)-paused).Seconds(), "sessions/s")
		b.ReportMetric(float64((cpuTime()-cpu-pausedCPU).Microseconds())/float64(b.N), "cpu-µs/session")
	})
}

// setupStorm connects sessions first..first+n-1, setupConcurrency at a
// time, and returns their open descriptors. With subscribe each is a new
// session that subscribes; without, a reconnect that must find its
// session present.
func setupStorm(b *testing.B, sa *syscall.SockaddrInet4, first, n int, subscribe bool) []int {
	fds := make([]int, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var fail atomic.Pointer[error]
	for range setupConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf [64]byte
			for {
				i := int(next.Add(1)) - 1
				if i >= n || fail.Load() != nil {
					return
				}
				if err := setupOne(sa, first+i, subscribe, &fds[i], buf[:]); err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := fail.Load(); p != nil {
		for _, fd := range fds {
			if fd > 0 {
				syscall.Close(fd)
			}
		}
		b.Fatal(*p)
	}
	return fds
}

// setupOne connects session i on a new descriptor, stored in *fd.
func setupOne(sa *syscall.SockaddrInet4, i int, subscribe bool, fd *int, buf []byte) error {
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	*fd = s
	if err := syscall.Connect(s, sa); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: fmt.Sprintf("setup-%06d", i)}).Append(nil, packet.V311)
	want := 1
	if subscribe {
		sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{
			{Filter: fmt.Sprintf("fleet/dev/%d", i), QoS: packet.QoS1}, {Filter: "fleet/all", QoS: packet.QoS1}}}
		out, _ = sub.Append(out, packet.V311)
		want = 2
	}
	if _, err := syscall.Write(s, out); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	// CONNACK is 4 bytes, the SUBACK of two filters 6.
	size := 4
	if want == 2 {
		size += 6
	}
	read := 0
	for read < size {
		m, err := syscall.Read(s, buf[read:])
		if err != nil || m == 0 {
			return fmt.Errorf("session %d: read after %d bytes: %w", i, read, err)
		}
		read += m
	}
	if buf[0] != 0x20 || buf[3] != 0 {
		return fmt.Errorf("session %d: CONNACK % x", i, buf[:4])
	}
	if present := buf[2]&1 == 1; present == subscribe {
		return fmt.Errorf("session %d: session present %v on a %s", i, present, map[bool]string{true: "new session", false: "reconnect"}[subscribe])
	}
	if subscribe && (buf[4] != 0x90 || buf[8] != 1 || buf[9] != 1) {
		return fmt.Errorf("session %d: SUBACK % x", i, buf[4:10])
	}
	return nil
}

// cpuTime is the CPU time this process used so far, user and system:
// with brokers and clients in one process and other work on the machine,
// a steadier figure than the rate.
func cpuTime() time.Duration { return proc.SelfCPU() }

// dropAll closes fds and waits until the broker has let go of every
// connection.
func dropAll(b *testing.B, br *mqtt.Broker, fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
	deadline := time.Now().Add(time.Minute)
	for br.Stats().ConnectionsOnline > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%d connections still online a minute after their sockets closed", br.Stats().ConnectionsOnline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
