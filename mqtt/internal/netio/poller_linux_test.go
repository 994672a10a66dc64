package netio

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

type chanWaiter chan struct{}

func (w chanWaiter) Ready() { w <- struct{}{} }

func rawConn(t *testing.T, c net.Conn) syscall.RawConn {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func expect(t *testing.T, w chanWaiter, want bool, what string) {
	t.Helper()
	select {
	case <-w:
		if !want {
			t.Fatalf("%s: a report came", what)
		}
	case <-time.After(200 * time.Millisecond):
		if want {
			t.Fatalf("%s: no report", what)
		}
	}
}

// TestPollerReportsOncePerArm checks the poller's contract: one report
// per Arm, for input, for input already there, and for a hang-up; none
// after Remove; Arm on a closed socket fails.
func TestPollerReportsOncePerArm(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, server := tcpPair(t)
	rc := rawConn(t, server)
	w := make(chanWaiter, 4)
	id := p.Add(w)

	if err := p.Arm(rc, id); err != nil {
		t.Fatal(err)
	}
	expect(t, w, false, "armed, nothing sent")
	if _, err := client.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	expect(t, w, true, "input")
	if _, err := client.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	expect(t, w, false, "more input without arming again")
	if err := p.Arm(rc, id); err != nil {
		t.Fatal(err)
	}
	expect(t, w, true, "armed with input unread")

	var buf [8]byte
	if _, err := server.Read(buf[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.Arm(rc, id); err != nil {
		t.Fatal(err)
	}
	client.Close()
	expect(t, w, true, "the client hung up")

	p.Remove(id)
	if err := p.Arm(rc, id); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Arm after Remove: %v, want ErrUnknown", err)
	}
	expect(t, w, false, "removed")

	id = p.Add(w)
	server.Close()
	if err := p.Arm(rc, id); err == nil || errors.Is(err, ErrUnknown) {
		t.Fatalf("Arm on a closed socket: %v, want the socket's error", err)
	}
}

// TestPollerManySockets arms more sockets than one wait takes and checks
// that every one is reported, and that Close ends the poller.
func TestPollerManySockets(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*pollBatch + 7
	w := make(chanWaiter, n)
	clients := make([]net.Conn, n)
	for i := range n {
		client, server := tcpPair(t)
		clients[i] = client
		if err := p.Arm(rawConn(t, server), p.Add(w)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clients {
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case <-w:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d sockets reported", i, n)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
