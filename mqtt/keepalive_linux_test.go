package mqtt_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// TestTCPKeepAlive checks which of the broker's sockets have TCP
// keep-alive on, as the kernel reports it (the keep-alive timer in
// /proc/net/tcp): on a listener that leaves accepted sockets as they come,
// only those of clients without an MQTT keep alive (the broker turns it
// on); on one whose socket has it on (mqtt.KeepAliveControl), every one.
func TestTCPKeepAlive(t *testing.T) {
	s := startBroker(t)
	for i, tc := range []struct {
		name      string
		control   bool
		keepAlive uint16
		want      bool
	}{
		{"plain listener, no MQTT keep alive", false, 0, true},
		{"plain listener, MQTT keep alive", false, 60, false},
		{"keep-alive listener, no MQTT keep alive", true, 0, true},
		{"keep-alive listener, MQTT keep alive", true, 60, true},
	} {
		lc := net.ListenConfig{KeepAlive: -1}
		if tc.control {
			lc.Control = mqtt.KeepAliveControl
		}
		ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := serveOn(t, s, ln)
		r, _ := connectRaw(t, addr, &packet.Connect{Version: packet.V311, ClientID: fmt.Sprintf("tcpka-%d", i),
			CleanStart: true, KeepAlive: tc.keepAlive})
		if got := keepAliveTimer(t, ln.Addr(), r.Conn().LocalAddr()); got != tc.want {
			t.Errorf("%s: TCP keep-alive on the broker's socket %v, want %v", tc.name, got, tc.want)
		}
	}
}

// keepAliveTimer reports whether the socket local->remote has its
// keep-alive timer set, once no retransmission timer hides it.
func keepAliveTimer(t *testing.T, local, remote net.Addr) bool {
	t.Helper()
	hex := func(a net.Addr) string {
		ta := a.(*net.TCPAddr)
		ip := ta.IP.To4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ta.Port)
	}
	l, r := hex(local), hex(remote)
	deadline := time.Now().Add(wait)
	for {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		timer := ""
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 5 && f[1] == l && f[2] == r {
				timer, _, _ = strings.Cut(f[5], ":")
			}
		}
		switch timer {
		case "":
			t.Fatalf("no socket %s -> %s in /proc/net/tcp", l, r)
		case "00", "02": // none, keep-alive
			return timer == "02"
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket %s -> %s: timer %s, never settled", l, r, timer)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
