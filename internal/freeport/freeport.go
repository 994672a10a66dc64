// Package freeport hands out loopback TCP ports for brokers and servers
// that a test or a benchmark starts as child processes and must name in
// their configuration before they run.
//
// A port taken with a listen on port 0 and closed again comes from the
// kernel's ephemeral range, the same range every outgoing connection's
// local port is drawn from, so under load another test's client or
// another process's listen on port 0 takes it before the child binds it
// ("address already in use"). The ports given here lie below the
// ephemeral range, where the kernel never hands a port out by itself:
// only another caller of this package could take one. Within a process no
// port is given twice, and across processes each port given is claimed
// (a lock on a file named after it, held until the process ends), so a
// port another test process gave out is not given again even while its
// broker is down between a stop and a restart.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// low is the first port given; below it lie well-known services.
const low = 10000

// ErrNone is returned when no port in the range could be bound.
var ErrNone = errors.New("freeport: no free loopback port below the ephemeral range")

var (
	mu   sync.Mutex
	next int // 0 until the first call picks a random start
	high int // first port of the ephemeral range
)

// Port returns a port on 127.0.0.1 that was free when it was checked,
// lies below the kernel's ephemeral port range and was not returned
// before by this process.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if next == 0 {
		high = ephemeralLow()
		// A random start keeps concurrent test processes apart.
		next = low + rand.IntN(high-low)
	}
	for range high - low {
		p := next
		if next++; next >= high {
			next = low
		}
		if !claim(p) {
			continue // another process's, maybe free between its restarts
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	return 0, ErrNone
}

// Addr returns "127.0.0.1:<port>" for a port from Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// TB is the part of testing.TB that MustAddr uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// MustAddr is Addr for tests: it fails t when no port is free.
func MustAddr(t TB) string {
	t.Helper()
	a, err := Addr()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return a
}

// ephemeralLow reads the first port of the kernel's ephemeral range,
// falling back to the common Linux default.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return fallback
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= low+1000 {
		return fallback
	}
	return n
}
