//go:build linux

package netio

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestFlushNoWaitNeverWaits writes through FlushNoWait to a peer that
// does not read until the socket is full: no call may wait, the one that
// meets the full socket keeps the rest buffered, and once the peer reads,
// a Flush sends that rest so that the peer gets every byte in order.
func TestFlushNoWaitNeverWaits(t *testing.T) {
	client, server := tcpPair(t)
	rc := rawConn(t, server)
	w := NewWriter(server)
	var sent bytes.Buffer
	chunk := make([]byte, 1000)
	full := false
	for i := 0; i < 100_000 && !full; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		sent.Write(chunk)
		start := time.Now()
		flushed, err := w.FlushNoWait(rc)
		if err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("flush %d took %v", i, d)
		}
		full = !flushed
		if flushed && w.Buffered() != 0 {
			t.Fatalf("flush %d reported done with %d bytes buffered", i, w.Buffered())
		}
	}
	if !full {
		t.Fatal("the socket never filled")
	}
	if w.Buffered() == 0 || w.Buffered() > len(chunk) {
		t.Fatalf("%d bytes left buffered, want 1 to %d", w.Buffered(), len(chunk))
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(sent.Len())))
		got <- b
	}()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, sent.Bytes()) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), sent.Len())
	}
}

// TestFlushNoWaitReportsAClosedPeer: a write to a socket the peer closed
// fails, and the writer stays failed.
func TestFlushNoWaitReportsAClosedPeer(t *testing.T) {
	client, server := tcpPair(t)
	rc := rawConn(t, server)
	w := NewWriter(server)
	_ = client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := w.Write([]byte("x")); err != nil {
			return
		}
		if _, err := w.FlushNoWait(rc); err != nil {
			if _, err2 := w.FlushNoWait(rc); err2 == nil {
				t.Fatal("a failed writer flushed again")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed peer never failed")
		}
		time.Sleep(time.Millisecond)
	}
}

// deadlineWaiter is a WriteWaiter that sets the connection's write
// deadline a second away, as the broker's connections do, and counts the
// writes it was told of.
type deadlineWaiter struct {
	c     net.Conn
	calls int
}

func (d *deadlineWaiter) WillWait() {
	d.calls++
	_ = d.c.SetWriteDeadline(time.Now().Add(time.Second))
}

// TestWriterTellsOfWritesThatWait: with its socket set, a writer's
// writes that the socket takes whole go out without telling the waiter
// (and so without a deadline); one that meets a full socket tells it
// before it waits, and completes once the peer reads. A deadline that
// passed since does not fail a write the socket takes.
func TestWriterTellsOfWritesThatWait(t *testing.T) {
	client, server := tcpPair(t)
	ww := &deadlineWaiter{c: server}
	w := NewWriter(server)
	w.SetSocket(rawConn(t, server), ww)
	var sent bytes.Buffer
	write := func(p []byte) {
		t.Helper()
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		sent.Write(p)
	}
	write([]byte("small"))
	if ww.calls != 0 {
		t.Fatalf("a write the socket took whole told the waiter %d times", ww.calls)
	}
	// Larger than the socket's buffers: the write waits for the peer.
	read := make(chan []byte)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	go func() {
		time.Sleep(100 * time.Millisecond)
		b, _ := io.ReadAll(io.LimitReader(client, int64(len("small")+len(big))))
		read <- b
	}()
	write(big)
	if b := <-read; !bytes.Equal(b, sent.Bytes()) {
		t.Fatalf("the peer read %d bytes, not the %d written in order", len(b), sent.Len())
	}
	if ww.calls != 1 {
		t.Fatalf("a write that waited told the waiter %d times, want once", ww.calls)
	}
	// The deadline set for that write passes; a later write the socket
	// takes at once still goes out.
	_ = server.SetWriteDeadline(time.Now().Add(-time.Second))
	write([]byte("after the deadline"))
	b := make([]byte, len("after the deadline"))
	if _, err := io.ReadFull(client, b); err != nil || string(b) != "after the deadline" {
		t.Fatalf("after the deadline passed, read %q, %v", b, err)
	}
	if ww.calls != 2 {
		t.Fatalf("the waiter was told %d times, want twice (the write after the deadline re-arms it)", ww.calls)
	}
}
