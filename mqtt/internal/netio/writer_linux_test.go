//go:build linux

package netio

import (
	"bytes"
	"io"
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
