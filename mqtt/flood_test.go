package mqtt_test

// Hostile load at the door: floods of sockets that never send CONNECT,
// sources that connect too fast, and a listener whose Accept fails.

import (
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// waitFor polls cond until it holds or the wait bound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closedByPeer reports whether the broker closed nc: a read returns end
// of stream (or a reset) within d.
func closedByPeer(nc net.Conn, d time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	_, err := nc.Read(b[:])
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// Idle sockets beyond the cap: each new one takes the place of the oldest
// socket that has not sent CONNECT, so the open sockets stay at the cap,
// real clients still connect and messages still flow.
func TestFloodIdleSockets(t *testing.T) {
	const limit, flood = 32, 200
	s := startBroker(t, func(o *mqtt.Options) {
		o.MaxConnections = limit
		o.ConnectTimeout = time.Minute // the cap, not the timeout, must make room
	})
	idle := make([]net.Conn, 0, flood)
	for range flood {
		nc, err := net.DialTimeout("tcp", s.Addr, wait)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { nc.Close() })
		idle = append(idle, nc)
	}
	b := s.Broker()
	waitFor(t, "the sockets beyond the cap to be closed", func() bool {
		st := b.Stats()
		return st.Refused["evicted"] == flood-limit && st.Sockets == limit
	})
	for i, nc := range idle[:flood-limit] {
		if !closedByPeer(nc, wait) {
			t.Fatalf("idle socket %d of %d, beyond the cap, is still open", i, flood)
		}
	}
	for i, nc := range idle[flood-limit:] {
		if closedByPeer(nc, time.Millisecond) {
			t.Fatalf("idle socket %d within the cap was closed", flood-limit+i)
		}
	}

	sub := connect5(t, s.Addr, "flood-sub", true, 0)
	sub.sub("flood/t", 1)
	pub := connect3(t, s.Addr, "flood-pub", true)
	pub.pub("flood/t", 1, false, "through")
	sub.expectOne("flood/t", "through")
	if st := b.Stats(); st.Sockets != limit || st.AwaitingConnect != limit-2 {
		t.Fatalf("sockets %d (%d without CONNECT), want %d (%d)", st.Sockets, st.AwaitingConnect, limit, limit-2)
	}
}

// At the cap with every socket connected, a new socket is closed at once
// and the connected clients keep working.
func TestFloodCapAllConnected(t *testing.T) {
	const limit = 3
	s := startBroker(t, func(o *mqtt.Options) { o.MaxConnections = limit })
	sub := connect5(t, s.Addr, "cap-sub", true, 0)
	sub.sub("cap/t", 1)
	pub := connect5(t, s.Addr, "cap-pub", true, 0)
	connect5(t, s.Addr, "cap-3", true, 0)
	nc, err := net.DialTimeout("tcp", s.Addr, wait)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer nc.Close()
	if !closedByPeer(nc, wait) {
		t.Fatal("a socket past the cap of connected clients stayed open")
	}
	if n := s.Broker().Stats().Refused["max_connections"]; n != 1 {
		t.Fatalf("refused at the cap: %d, want 1", n)
	}
	pub.pub("cap/t", 1, false, "still")
	sub.expectOne("cap/t", "still")
}

// A source over the connection rate has its new sockets closed at once;
// another source would not be limited (loopback is one source here).
func TestFloodConnRate(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxConnRate = 5 })
	closed := 0
	for range 20 {
		nc, err := net.DialTimeout("tcp", s.Addr, wait)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if closedByPeer(nc, 50*time.Millisecond) {
			closed++
		}
		nc.Close()
	}
	// A burst of one second's worth (5) passes; the 1 s of dialing that
	// follows refills a few more.
	if closed < 10 {
		t.Fatalf("%d of 20 fast sockets closed, want at least 10", closed)
	}
	if n := s.Broker().Stats().Refused["rate"]; n != uint64(closed) {
		t.Fatalf("rate refusals counted %d, closed %d", n, closed)
	}
}

// A socket that never sends CONNECT is closed after the connect timeout.
func TestFloodConnectTimeout(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.ConnectTimeout = 200 * time.Millisecond })
	nc, err := net.DialTimeout("tcp", s.Addr, wait)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer nc.Close()
	if !closedByPeer(nc, wait) {
		t.Fatal("an idle socket outlived the connect timeout")
	}
	waitFor(t, "the timeout to be counted", func() bool { return s.Broker().Stats().Refused["connect_timeout"] == 1 })
}

// failingListener fails its first Accepts as a process out of descriptors
// does, then accepts normally.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// Accept errors are retried: the listener keeps serving.
func TestFloodAcceptErrorsRetried(t *testing.T) {
	s := startBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.fails.Store(5)
	served := make(chan error, 1)
	go func() { served <- s.Broker().Serve(fl) }()
	c := connect5(t, ln.Addr().String(), "after-emfile", true, 0)
	c.sub("emfile/t", 0)
	if n := s.Broker().Stats().AcceptErrors; n != 5 {
		t.Fatalf("accept errors counted: %d, want 5", n)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned after accept errors: %v", err)
	default:
	}
}

// Bytes a client sends right behind its CONNECT, in the same segment, are
// read after the connection moves to its full buffers.
func TestFloodPipelinedAfterConnect(t *testing.T) {
	s := startBroker(t)
	r := dialRaw(t, s.Addr, packet.V5)
	cp := connect5Packet("pipelined", true, 0)
	var buf []byte
	buf, _ = cp.Append(buf, packet.V5)
	sub := &packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "pipe/t", QoS: 1}}}
	buf, _ = sub.Append(buf, packet.V5)
	pub := &packet.Publish{QoS: packet.QoS1, PacketID: 2, Topic: "pipe/t", Payload: []byte("x")}
	buf, _ = pub.Append(buf, packet.V5)
	r.SendBytes(buf)
	var got []packet.Type
	for len(got) < 4 {
		p := r.Read("packet")
		got = append(got, p.Type())
	}
	want := map[packet.Type]bool{packet.TypeConnack: true, packet.TypeSuback: true, packet.TypePuback: true, packet.TypePublish: true}
	for _, ty := range got {
		if !want[ty] {
			t.Fatalf("got %v, want CONNACK, SUBACK, PUBACK and the PUBLISH", got)
		}
		delete(want, ty)
	}
}
