package mqtt_test

// TLS, mutual TLS and WebSocket listeners with real clients: paho over
// TLS, MQTT.js over ws:// and wss:// exchanging messages with a TCP
// client, refusals first.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/gorilla/websocket"

	"github.com/tidemark-io/tidemark/internal/certs/certstest"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
)

// serveOn has the test's broker serve ln too; it stops with the broker.
func serveOn(t *testing.T, s *mqtttest.Server, ln net.Listener) string {
	t.Helper()
	// The broker is read here, not in the goroutine: the test's cleanup
	// may stop the server (and clear it) before the goroutine runs.
	b := s.Broker()
	go func() { _ = b.Serve(ln) }()
	return ln.Addr().String()
}

// A listener handed to Serve as the broker closes, or after, is closed
// too: its port is free for the next broker, as a restart needs.
func TestServeAfterCloseClosesListener(t *testing.T) {
	s := startBroker(t)
	b := s.Broker()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := b.Serve(ln); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after Close: %v, want net.ErrClosed", err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the listener Serve refused still holds its port: %v", err)
	}
	_ = again.Close()
}

func listenTLS(t *testing.T, conf *tls.Config) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return tls.NewListener(ln, conf)
}

// dialTLS5 connects a 5.0 client over TLS. The TLS connection is wrapped
// for paho's writers to take turns (see connectOn5): a tls.Conn sends
// each write as a record of its own, and paho's pinger would otherwise
// put its PINGREQ inside the packet being written, which the broker
// rightly refuses as malformed.
func dialTLS5(t *testing.T, addr string, conf *tls.Config, cp *paho.Connect) (*client5, error) {
	t.Helper()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: wait}, Config: conf}
	nc, err := d.DialContext(ctxT(t), "tcp", addr)
	if err != nil {
		return nil, err
	}
	return connectOn5(t, packets.NewThreadSafeConn(nc), cp, nil)
}

func TestTLSUntrustedServerRefused(t *testing.T) {
	ca, other := certstest.NewCA(t, "tidemark test CA"), certstest.NewCA(t, "someone else")
	s := startBroker(t)
	addr := serveOn(t, s, listenTLS(t, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server()}}))
	_, err := dialTLS5(t, addr, &tls.Config{RootCAs: other.Pool()}, &paho.Connect{ClientID: "u", CleanStart: true})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another CA connected: %v", err)
	}
	// TLS 1.1 is refused.
	_, err = dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, &paho.Connect{ClientID: "old", CleanStart: true})
	if err == nil {
		t.Fatal("a TLS 1.1 client connected")
	}
	c, err := dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool()}, &paho.Connect{ClientID: "ok", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	c.sub("tls/x", 1)
	c.pub("tls/x", 1, false, "over tls")
	c.expectOne("tls/x", "over tls")
	if n := s.Broker().Stats().Connects; n != 1 {
		t.Fatalf("Connects = %d, want 1: only the trusting client", n)
	}
}

func TestMutualTLS(t *testing.T) {
	ca, rogue := certstest.NewCA(t, "tidemark test CA"), certstest.NewCA(t, "rogue CA")
	_, _, aclPath := authFiles(t, testACL, false)
	files, err := auth.Open(auth.Config{ACLFile: aclPath, CertIdentity: auth.CertCN})
	if err != nil {
		t.Fatal(err)
	}
	s := startSecured(t, files)
	addr := serveOn(t, s, listenTLS(t, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server()},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
	cp := func(id string) *paho.Connect { return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30} }

	if _, err := dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool()}, cp("nocert")); err == nil {
		t.Fatal("a client without a certificate connected")
	}
	if _, err := dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{rogue.Client("alice", "")}}, cp("rogue")); err == nil {
		t.Fatal("a client with a certificate of another CA connected")
	}
	// The certificate's CN is the user: alice's rules apply, no password.
	alice, err := dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client("alice", "")}}, cp("alice-cert"))
	if err != nil {
		t.Fatalf("alice with her certificate: %v", err)
	}
	sa, _ := alice.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "alice/#", QoS: 1}, {Topic: "bob/#", QoS: 1}}})
	if sa == nil || sa.Reasons[0] != 1 || sa.Reasons[1] != 0x87 {
		t.Fatalf("SUBACK for the certificate's user: %+v, want [1 0x87]", sa)
	}
	// Its client id binding too: bob's certificate cannot take alice-cert.
	c, err := dialTLS5(t, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client("bob", "")}}, cp("alice-cert"))
	if err == nil || c.ack == nil || c.ack.ReasonCode != 0x87 {
		t.Fatalf("bob's certificate with alice's client id: %v, want 0x87", err)
	}
}

func TestWebSocketRefusesWithoutSubprotocol(t *testing.T) {
	s := startBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, s, mqtt.ListenWebSocket(ln, nil))
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+mqtt.WebSocketPath, nil)
	if resp != nil {
		resp.Body.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("WebSocket without subprotocol: %v %v, want HTTP 400", err, resp)
	}
	_, resp, err = (&websocket.Dialer{Subprotocols: []string{"mqtt"}}).Dial("ws://"+addr+"/other", nil)
	if resp != nil {
		resp.Body.Close()
	}
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("WebSocket on another path: %v %v, want HTTP 404", err, resp)
	}
}

// TestInteropMQTTJSWebSocket: MQTT.js over ws:// and wss:// and a paho
// client over TCP, on one broker with the password and ACL files,
// exchange messages both ways.
func TestInteropMQTTJSWebSocket(t *testing.T) {
	node, dir := mqttJS(t)
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	ca := certstest.NewCA(t, "tidemark test CA")
	caFile := ca.WriteCA(t.TempDir(), "ca.pem")
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wsAddr := serveOn(t, s, mqtt.ListenWebSocket(plain, nil))
	wssAddr := serveOn(t, s, mqtt.ListenWebSocket(listenTLS(t, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server()}}), nil))

	for _, c := range []struct{ name, url string }{{"ws", "ws://" + wsAddr + "/mqtt"}, {"wss", "wss://" + wssAddr + "/mqtt"}} {
		t.Run(c.name, func(t *testing.T) {
			tcp := connect5as(t, s.Addr, "alice-tcp-"+c.name, "alice", "wonderland")
			tcp.sub("alice/from-js", 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "ws.js")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TIDEMARK_WS_URL="+c.url, "TIDEMARK_CA="+caFile)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(out)
			var log []string
			for lines.Scan() {
				log = append(log, lines.Text())
				if lines.Text() == "ready" {
					break
				}
			}
			if len(log) == 0 || log[len(log)-1] != "ready" {
				_ = cmd.Wait()
				t.Fatalf("ws.js did not get ready: %v\n%s", log, stderr.String())
			}
			tcp.pub("alice/to-js", 1, false, "hello from tcp over "+c.name)
			tcp.expectOne("alice/from-js", "echo:hello from tcp over "+c.name)
			for lines.Scan() {
				log = append(log, lines.Text())
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("ws.js: %v\n%s\n%s", err, strings.Join(log, "\n"), stderr.String())
			}
			t.Logf("ws.js over %s:\n%s", c.name, strings.Join(log, "\n"))
		})
	}
}
