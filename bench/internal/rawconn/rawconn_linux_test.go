package rawconn

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDialFrom checks that a connection dialled from another loopback
// address arrives from it, and one without a source from 127.0.0.1.
func TestDialFrom(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, src := range []net.IP{net.IPv4(127, 0, 0, 7), nil} {
		fd, _, err := DialFrom(ln.Addr().String(), src, 5*time.Second)
		if err != nil {
			t.Fatalf("dial from %v: %v", src, err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		want := "127.0.0.7"
		if src == nil {
			want = "127.0.0.1"
		}
		if got := c.RemoteAddr().(*net.TCPAddr).IP.String(); got != want {
			t.Fatalf("dialled from %v: the listener sees %s, want %s", src, got, want)
		}
		c.Close()
		syscall.Close(fd)
	}
}
