package admit

import (
	"net"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
)

// fromConn is a socket from a given source address.
type fromConn struct {
	net.Conn
	addr net.Addr
}

func (c fromConn) RemoteAddr() net.Addr { return c.addr }

func socket(t *testing.T, host string) *Socket {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &Socket{Conn: fromConn{a, &net.TCPAddr{IP: net.ParseIP(host), Port: 40000}}}
}

// TestGateEvictsOldestWaiting: at the cap a new socket takes the place of
// the oldest one without a CONNECT; only with every socket connected is
// the new one refused, and a released socket makes room again.
func TestGateEvictsOldestWaiting(t *testing.T) {
	g := New(2, 0)
	now := time.Now()
	s1, s2, s3, s4 := socket(t, "127.0.0.1"), socket(t, "127.0.0.1"), socket(t, "127.0.0.1"), socket(t, "127.0.0.1")
	for _, s := range []*Socket{s1, s2} {
		if r, ev := g.Admit(s, now); r != "" || ev != nil {
			t.Fatalf("admit under the cap: %q, %v", r, ev)
		}
	}
	if !g.Connected(s2) {
		t.Fatal("s2 was not waiting")
	}
	r, ev := g.Admit(s3, now)
	if r != "" || ev != s1.Conn {
		t.Fatalf("admit at the cap = %q, evicting %v; want s1 evicted", r, ev)
	}
	if g.Connected(s1) {
		t.Fatal("an evicted socket reported connected")
	}
	g.Release(s1)
	if !g.Connected(s3) {
		t.Fatal("s3 was not waiting")
	}
	if r, _ := g.Admit(s4, now); r != counters.RefusedCap {
		t.Fatalf("admit with every socket connected = %q, want %q", r, counters.RefusedCap)
	}
	if open, waiting := g.Counts(); open != 2 || waiting != 0 {
		t.Fatalf("counts %d open, %d waiting; want 2, 0", open, waiting)
	}
	g.Release(s2)
	if r, ev := g.Admit(s4, now); r != "" || ev != nil {
		t.Fatalf("admit after a release: %q, %v", r, ev)
	}
}

// TestGateRatePerSource: one source address is held to the rate, with a
// burst of the rate, another is not affected, and tokens come back with
// time.
func TestGateRatePerSource(t *testing.T) {
	g := New(100, 2)
	now := time.Now()
	for i := range 2 {
		if r, _ := g.Admit(socket(t, "10.0.0.1"), now); r != "" {
			t.Fatalf("socket %d within the burst refused: %q", i, r)
		}
	}
	if r, _ := g.Admit(socket(t, "10.0.0.1"), now); r != counters.RefusedRate {
		t.Fatalf("third socket at once = %q, want %q", r, counters.RefusedRate)
	}
	if r, _ := g.Admit(socket(t, "10.0.0.2"), now); r != "" {
		t.Fatalf("another source refused: %q", r)
	}
	if r, _ := g.Admit(socket(t, "10.0.0.1"), now.Add(500*time.Millisecond)); r != "" {
		t.Fatalf("a socket after a token came back refused: %q", r)
	}
}

// TestGateClose: a closed gate refuses every new socket and closes those
// still without a CONNECT, not the connected ones.
func TestGateClose(t *testing.T) {
	g := New(10, 0)
	now := time.Now()
	waiting, connected := socket(t, "127.0.0.1"), socket(t, "127.0.0.1")
	g.Admit(waiting, now)
	g.Admit(connected, now)
	g.Connected(connected)
	g.Close()
	if r, _ := g.Admit(socket(t, "127.0.0.1"), now); r != counters.RefusedClosing {
		t.Fatalf("admit after Close = %q, want %q", r, counters.RefusedClosing)
	}
	if _, err := waiting.Conn.Write([]byte{0}); err == nil {
		t.Fatal("a socket without a CONNECT is still open after Close")
	}
	done := make(chan error, 1)
	go func() { _, err := connected.Conn.Write([]byte{0}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("the connected socket was closed: %v", err)
	case <-time.After(50 * time.Millisecond):
		// net.Pipe blocks a write until read: still open.
	}
}
