package main_test

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/internal/certs/certstest"
)

const e2eACL = `user alice
topic readwrite alice/#
user bob
topic read alice/status
pattern clientid %u-*
`

// secureSetup writes users (with `tidemark passwd`), an ACL, a CA and a
// server certificate, and a config serving plain MQTT, MQTT over TLS and
// metrics with them.
type secureSetup struct {
	bin, dir, cfg, acl, caFile string
	mqtt, mqtts, metrics       string
	ca                         *certstest.CA
}

func newSecureSetup(t *testing.T) *secureSetup {
	t.Helper()
	s := &secureSetup{bin: tidemarkBinary(t), dir: t.TempDir(), mqtt: freeAddr(t), mqtts: freeAddr(t), metrics: freeAddr(t)}
	pw := filepath.Join(s.dir, "passwd")
	for _, u := range [][]string{{"alice", "wonderland", "argon2id"}, {"bob", "builder", "bcrypt"}} {
		cmd := exec.Command(s.bin, "passwd", "--hash", u[2], pw, u[0])
		cmd.Stdin = strings.NewReader(u[1] + "\n")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "set the password of "+u[0]) {
			t.Fatalf("tidemark passwd %s: %v\n%s", u[0], err, out)
		}
	}
	if out, err := exec.Command(s.bin, "passwd", "-D", pw, "carol").CombinedOutput(); err == nil || !strings.Contains(string(out), `no such user "carol"`) {
		t.Fatalf("passwd -D of an unknown user: %v\n%s", err, out)
	}
	s.acl = filepath.Join(s.dir, "acl")
	if err := os.WriteFile(s.acl, []byte(e2eACL), 0o600); err != nil {
		t.Fatal(err)
	}
	s.ca = certstest.NewCA(t, "tidemark e2e CA")
	s.caFile = s.ca.WriteCA(s.dir, "ca.pem")
	cert, key := certstest.WritePair(t, s.ca.Server(), s.dir, "server")
	s.cfg = filepath.Join(s.dir, "tidemark.yaml")
	yaml := strings.Join([]string{
		"data: " + filepath.Join(s.dir, "data"), "mqtt: " + s.mqtt, "mqtts: " + s.mqtts, "metrics: " + s.metrics,
		"tls-cert: " + cert, "tls-key: " + key, "password-file: " + pw, "acl-file: " + s.acl,
		"auth-failure-delay: 10ms", "log-level: debug", "",
	}, "\n")
	if err := os.WriteFile(s.cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func dialAs(addr, id, user, pw string, h paho3.MessageHandler, tlsConf *tls.Config) (paho3.Client, byte, error) {
	scheme := "tcp://"
	if tlsConf != nil {
		scheme = "ssl://"
	}
	o := paho3.NewClientOptions().AddBroker(scheme + addr).SetClientID(id).SetUsername(user).SetPassword(pw).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).SetDefaultPublishHandler(h).SetTLSConfig(tlsConf)
	c := paho3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		return nil, 0, os.ErrDeadlineExceeded
	}
	return c, tok.(*paho3.ConnectToken).ReturnCode(), tok.Error()
}

// TestServeSecured runs `tidemark serve` with a password file, an ACL
// and a TLS listener: refusals, a TLS session, a SIGHUP with a broken
// ACL that keeps the rules, one with a fixed ACL that changes them, and
// the refusals in /metrics.
func TestServeSecured(t *testing.T) {
	s := newSecureSetup(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mqtts", "127.0.0.1:0", "--tls-cert", ""}, "--mqtts and --wss need --tls-cert and --tls-key"},
		{[]string{"--tls-identity", "cn"}, "--tls-identity needs --tls-client-ca"},
		{[]string{"--tls-identity", "uid", "--tls-client-ca", s.caFile}, `--tls-identity "uid": use cn or san`},
		{[]string{"--mqtt", "", "--mqtts", ""}, "no listener"},
		{[]string{"--nats-nkey", "user.nk"}, "apply only to --engine jetstream"},
		{[]string{"--engine", "jetstream", "--nats-tls-ca", "ca.pem"}, "apply with --nats-url"},
	} {
		out, err := exec.Command(s.bin, append([]string{"serve", "--config", s.cfg}, c.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Fatalf("serve %v: %v\n%s\nwant %q", c.args, err, out, c.want)
		}
	}
	srv := startServe(t, s.bin, s.cfg, s.mqtt)
	defer srv.stop(t)

	if _, rc, err := dialAs(s.mqtt, "alice-1", "alice", "looking-glass", nil, nil); err == nil || rc != 4 {
		t.Fatalf("wrong password: %v, return code %d, want 4", err, rc)
	}
	if _, rc, err := dialAs(s.mqtt, "anon", "", "", nil, nil); err == nil || rc != 5 {
		t.Fatalf("anonymous: %v, return code %d, want 5", err, rc)
	}
	if _, _, err := dialAs(s.mqtts, "alice-u", "alice", "wonderland", nil, &tls.Config{}); err == nil {
		t.Fatal("TLS client trusting only the system roots connected")
	}
	got := make(chan string, 8)
	sub, _, err := dialAs(s.mqtts, "alice-sub", "alice", "wonderland", func(_ paho3.Client, m paho3.Message) { got <- m.Topic() + " " + string(m.Payload()) },
		&tls.Config{RootCAs: s.ca.Pool()})
	if err != nil {
		t.Fatalf("alice over TLS: %v", err)
	}
	defer sub.Disconnect(100)
	if tok := sub.Subscribe("alice/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	bob, _, err := dialAs(s.mqtt, "bob-1", "bob", "builder", nil, nil)
	if err != nil {
		t.Fatalf("bob: %v", err)
	}
	defer bob.Disconnect(100)
	subscribeResult := func() byte {
		tok := bob.Subscribe("alice/#", 1, nil)
		if !tok.WaitTimeout(5 * time.Second) {
			t.Fatal("SUBACK timed out")
		}
		return tok.(*paho3.SubscribeToken).Result()["alice/#"]
	}
	if rc := subscribeResult(); rc != 0x80 {
		t.Fatalf("bob subscribing to alice/#: %#x, want 0x80", rc)
	}
	publish(t, bob, "alice/status", false, "forged") // acknowledged, dropped
	alice, _, err := dialAs(s.mqtt, "alice-pub", "alice", "wonderland", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Disconnect(100)
	publish(t, alice, "alice/status", false, "up")
	select {
	case m := <-got:
		if m != "alice/status up" {
			t.Fatalf("alice over TLS received %q, want alice's own message, not bob's", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered over TLS")
	}

	// A broken ACL is refused on SIGHUP, naming its line; the rules stay.
	if err := os.WriteFile(s.acl, []byte(e2eACL+"topic raed x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup := func(want string) {
		t.Helper()
		if err := srv.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(srv.Log(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", want, srv.Log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hup(s.acl + `:6: auth: syntax error: unknown access \"raed\"`)
	if rc := subscribeResult(); rc != 0x80 {
		t.Fatalf("after a refused reload bob's subscription got %#x, want the old rules' 0x80", rc)
	}
	if err := os.WriteFile(s.acl, []byte(strings.Replace(e2eACL, "topic read alice/status", "topic read alice/#", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	hup("password and ACL files reloaded")
	if rc := subscribeResult(); rc != 1 {
		t.Fatalf("after the reload bob's subscription got %#x, want 1", rc)
	}
	if !sub.IsConnectionOpen() || !bob.IsConnectionOpen() {
		t.Fatal("a reload dropped a connection")
	}

	body := scrapeMetrics(t, s.metrics)
	for _, want := range []string{`tidemark_auth_refused_total{reason="bad_credentials"} 1`, `tidemark_auth_refused_total{reason="not_authorized"} 1`,
		`tidemark_acl_denied_total{access="subscribe"} 2`, `tidemark_acl_denied_total{access="write"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
}

// TestServeTLSMosquittoSub: mosquitto_sub --cafile receives over TLS what
// a TCP client publishes; refused with a wrong password. Skipped only
// where mosquitto_sub is not installed (Debian: mosquitto-clients).
func TestServeTLSMosquittoSub(t *testing.T) {
	msub, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Skip("mosquitto_sub not installed (apt-get install mosquitto-clients)")
	}
	s := newSecureSetup(t)
	srv := startServe(t, s.bin, s.cfg, s.mqtt)
	defer srv.stop(t)
	_, port, _ := strings.Cut(s.mqtts, ":")
	args := func(pw string) []string {
		return []string{"-h", "localhost", "-p", port, "--cafile", s.caFile, "-u", "alice", "-P", pw, "-i", "alice-msub", "-t", "alice/#", "-C", "1", "-W", "10", "-v"}
	}
	out, err := exec.Command(msub, args("looking-glass")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad user name or password") {
		t.Fatalf("mosquitto_sub with a wrong password: %v\n%s", err, out)
	}
	cmd := exec.Command(msub, args("wonderland")...)
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pub, _, err := dialAs(s.mqtt, "alice-pub", "alice", "wonderland", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Disconnect(100)
	// mosquitto_sub subscribes once connected: publish until it has one.
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		publish(t, pub, "alice/tls", false, "hello over TLS")
		select {
		case err := <-waited:
			if err != nil || strings.TrimSpace(buf.String()) != "alice/tls hello over TLS" {
				t.Fatalf("mosquitto_sub: %v\n%s", err, buf.String())
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
