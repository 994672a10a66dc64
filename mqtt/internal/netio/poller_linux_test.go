package netio

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// chanWaiter reports each report on its channel, always waiting.
type chanWaiter chan struct{}

func (w chanWaiter) Ready() bool { w <- struct{}{}; return true }

// busyWaiter reports each report on ch, and says it was waiting for it
// only while waiting is set.
type busyWaiter struct {
	ch      chanWaiter
	waiting atomic.Bool
}

func (w *busyWaiter) Ready() bool { w.ch <- struct{}{}; return w.waiting.Load() }

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

// TestPollerReports checks the poller's contract: a report for each
// input while the waiter waits, for input already there when it is armed
// again after a report it was not waiting for or with more, and for a
// hang-up; none between that report and the next Arm, none for input
// already reported, and none after Remove; Arm on a closed socket fails.
func TestPollerReports(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client, server := tcpPair(t)
	rc := rawConn(t, server)
	w := &busyWaiter{ch: make(chanWaiter, 4)}
	w.waiting.Store(true)
	id := p.Add(w)
	send := func(b string) {
		t.Helper()
		if _, err := client.Write([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}

	if err := p.Arm(rc, id, false); err != nil {
		t.Fatal(err)
	}
	expect(t, w.ch, false, "armed, nothing sent")
	send("a")
	expect(t, w.ch, true, "input")
	send("b")
	expect(t, w.ch, true, "more input, still waiting")
	if err := p.Arm(rc, id, false); err != nil {
		t.Fatal(err)
	}
	expect(t, w.ch, false, "armed again, nothing new")

	w.waiting.Store(false) // reading: the next report disarms
	send("c")
	expect(t, w.ch, true, "input while reading")
	send("d")
	expect(t, w.ch, false, "more input, disarmed")
	w.waiting.Store(true)
	if err := p.Arm(rc, id, false); err != nil {
		t.Fatal(err)
	}
	expect(t, w.ch, true, "armed again with input unread")

	// A read that fills its buffer leaves input behind: armed again
	// without more, a socket with nothing new to report stays silent;
	// with it, the input there is reported.
	var one [1]byte
	if _, err := server.Read(one[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.Arm(rc, id, false); err != nil {
		t.Fatal(err)
	}
	expect(t, w.ch, false, "armed again, input left behind but nothing new")
	if err := p.Arm(rc, id, true); err != nil {
		t.Fatal(err)
	}
	expect(t, w.ch, true, "armed again with more, input left behind")

	var buf [8]byte
	if _, err := server.Read(buf[:]); err != nil {
		t.Fatal(err)
	}
	if err := p.Arm(rc, id, false); err != nil {
		t.Fatal(err)
	}
	client.Close()
	expect(t, w.ch, true, "the client hung up")

	p.Remove(id)
	if err := p.Arm(rc, id, false); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Arm after Remove: %v, want ErrUnknown", err)
	}
	expect(t, w.ch, false, "removed")

	id = p.Add(w)
	server.Close()
	if err := p.Arm(rc, id, false); err == nil || errors.Is(err, ErrUnknown) {
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
		if err := p.Arm(rawConn(t, server), p.Add(w), false); err != nil {
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
