package netio

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestConnReaderReadsWhatWasSent sends bursts of random sizes, with
// pauses between them, through a socket and through a pipe, and checks
// that the reader returns exactly the bytes sent, by Read and ReadByte
// alike, and that on the socket it holds no buffer while it waits.
func TestConnReaderReadsWhatWasSent(t *testing.T) {
	for _, kind := range []string{"socket", "pipe"} {
		t.Run(kind, func(t *testing.T) {
			var src, dst net.Conn
			if kind == "socket" {
				src, dst = tcpPair(t)
			} else {
				src, dst = net.Pipe()
				t.Cleanup(func() { src.Close(); dst.Close() })
			}
			cr := NewReader(dst)
			if (cr.rc != nil) != (kind == "socket") {
				t.Fatalf("raw socket found: %v", cr.rc != nil)
			}
			rng := rand.New(rand.NewPCG(7, 9))
			var sent bytes.Buffer
			bursts := make([][]byte, 40)
			for i := range bursts {
				b := make([]byte, 1+rng.IntN(3*ReadBuf))
				for j := range b {
					b[j] = byte(rng.Uint32())
				}
				bursts[i] = b
				sent.Write(b)
			}
			go func() {
				for i, b := range bursts {
					if _, err := src.Write(b); err != nil {
						return
					}
					if i%8 == 0 {
						time.Sleep(5 * time.Millisecond) // the reader waits
					}
				}
				src.Close()
			}()
			var got bytes.Buffer
			p := make([]byte, 700)
			for i := 0; ; i++ {
				if i%3 == 0 {
					b, err := cr.ReadByte()
					if errors.Is(err, io.EOF) {
						break
					} else if err != nil {
						t.Fatal(err)
					}
					got.WriteByte(b)
					continue
				}
				n, err := cr.Read(p[:1+i%len(p)])
				got.Write(p[:n])
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got.Bytes(), sent.Bytes()) {
				t.Fatalf("read %d bytes, sent %d: contents differ", got.Len(), sent.Len())
			}
			if kind == "socket" && (cr.small != nil || cr.big != nil) {
				t.Fatal("the reader holds a buffer after the socket ended")
			}
			cr.Release()
		})
	}
}

// readerWithUnread returns a socket pair and a Reader of its server end
// that read "a" of the "ab" sent, so "b" is buffered.
func readerWithUnread(t *testing.T) (src, dst net.Conn, cr *Reader) {
	t.Helper()
	src, dst = tcpPair(t)
	cr = NewReader(dst)
	if _, err := src.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if b, err := cr.ReadByte(); err != nil || b != 'a' {
		t.Fatalf("ReadByte = %q, %v", b, err)
	}
	return src, dst, cr
}

// TestConnReaderWaitsWithoutBuffer checks that a reader waiting on an
// idle socket holds no buffer, and that a read deadline ends the wait
// with a timeout.
func TestConnReaderWaitsWithoutBuffer(t *testing.T) {
	_, dst, cr := readerWithUnread(t)
	if cr.small == nil {
		t.Fatal("no buffer holds the unread byte")
	}
	if b, err := cr.ReadByte(); err != nil || b != 'b' {
		t.Fatalf("ReadByte = %q, %v", b, err)
	}
	_ = dst.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := cr.ReadByte()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a deadline error", err)
	}
	if cr.small != nil || cr.big != nil {
		t.Fatal("the reader held a buffer while it waited")
	}
}

// TestReaderIdle checks that Idle keeps a buffer holding unread input,
// gives it back once everything was read, and leaves the reader usable.
func TestReaderIdle(t *testing.T) {
	src, _, cr := readerWithUnread(t)
	cr.Idle()
	if cr.small == nil || cr.Buffered() != 1 {
		t.Fatalf("Idle dropped unread input: buffer %v, %d buffered", cr.small != nil, cr.Buffered())
	}
	if b, err := cr.ReadByte(); err != nil || b != 'b' {
		t.Fatalf("ReadByte = %q, %v", b, err)
	}
	if cr.small == nil {
		t.Fatal("the buffer went before Idle: the test no longer shows what Idle does")
	}
	cr.Idle()
	if cr.small != nil || cr.big != nil {
		t.Fatal("Idle kept a buffer with nothing unread")
	}
	if _, err := src.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	if b, err := cr.ReadByte(); err != nil || b != 'c' {
		t.Fatalf("ReadByte after Idle = %q, %v", b, err)
	}
}

// TestWaitTimesOutThenReads checks that Wait fails at the read deadline
// holding no buffer and consuming nothing, and that once the deadline
// moves it waits again and buffers what comes, which reads back whole.
func TestWaitTimesOutThenReads(t *testing.T) {
	src, dst := tcpPair(t)
	cr := NewReader(dst)
	if err := dst.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := cr.Wait(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait with nothing sent: %v, want a deadline error", err)
	}
	if cr.buf != nil || cr.Buffered() != 0 {
		t.Fatalf("after the deadline: buffer held %v, %d bytes buffered", cr.buf != nil, cr.Buffered())
	}
	if err := dst.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := cr.Wait(); err != nil {
		t.Fatalf("Wait after a write: %v", err)
	}
	if err := cr.Wait(); err != nil || cr.Buffered() != 5 {
		t.Fatalf("Wait with input buffered: %v, %d bytes buffered", err, cr.Buffered())
	}
	got, err := io.ReadAll(io.LimitReader(cr, 5))
	if err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	src.Close()
	if err := cr.Wait(); !errors.Is(err, io.EOF) {
		t.Fatalf("Wait after the peer closed: %v, want EOF", err)
	}
}
