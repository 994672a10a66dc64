package mqtt_test

// Authentication and authorization with real clients: the password and
// ACL files of package auth behind the broker's interfaces, refusals
// first.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paho3 "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/bcrypt"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
)

const testACL = `topic read public/#

user alice
topic readwrite alice/#
topic write shared/in
topic read $share-ok/#
topic read jobs/#

user bob
topic read alice/status
topic readwrite bob/#
topic read jobs/#

pattern clientid %u-*
pattern readwrite devices/%u/#
`

// authFiles writes a password file with alice/wonderland and bob/builder
// (bcrypt at its least cost, to keep the tests quick under the race
// detector) and the ACL, and opens them.
func authFiles(t *testing.T, acl string, anonymous bool) (*auth.Files, string, string) {
	t.Helper()
	dir := t.TempDir()
	pw, aclPath := filepath.Join(dir, "passwd"), filepath.Join(dir, "acl")
	for user, p := range map[string]string{"alice": "wonderland", "bob": "builder"} {
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		if err := auth.SetPassword(pw, user, string(h)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(aclPath, []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := auth.Open(auth.Config{PasswordFile: pw, ACLFile: aclPath, AllowAnonymous: anonymous})
	if err != nil {
		t.Fatal(err)
	}
	return f, pw, aclPath
}

// startSecured starts a broker over f with a short failure delay.
func startSecured(t *testing.T, f *auth.Files, edit ...func(*mqtt.Options)) *mqtttest.Server {
	return startBroker(t, append([]func(*mqtt.Options){func(o *mqtt.Options) {
		o.Authenticator, o.Authorizer = f, f
		o.AuthFailureDelay = 50 * time.Millisecond
	}}, edit...)...)
}

func login5(id, user, pw string) *paho.Connect {
	return &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Username: user, UsernameFlag: user != "", Password: []byte(pw), PasswordFlag: pw != ""}
}

func creds3(user, pw string) func(*paho3.ClientOptions) {
	return func(o *paho3.ClientOptions) { o.SetUsername(user).SetPassword(pw) }
}

func TestAuthRefusals(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	for _, c := range []struct {
		name, user, pw string
		rc5, rc3       byte
		reason         string
	}{
		{"wrong password", "alice", "looking-glass", 0x86, 4, "bad_credentials"},
		{"unknown user", "mallory", "wonderland", 0x86, 4, "bad_credentials"},
		{"no password", "alice", "", 0x86, 4, "bad_credentials"},
		{"anonymous", "", "", 0x87, 5, "not_authorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := s.Broker().Stats().AuthRefused[c.reason]
			cl, err := dial5(t, s.Addr, login5("x5", c.user, c.pw), nil)
			if err == nil || cl.ack == nil || cl.ack.ReasonCode != c.rc5 {
				t.Fatalf("5.0: err %v, CONNACK %+v, want reason %#x", err, cl.ack, c.rc5)
			}
			_, rc, err := dial3(t, s.Addr, "x3", true, creds3(c.user, c.pw))
			if err == nil || rc != c.rc3 {
				t.Fatalf("3.1.1: err %v, return code %d, want %d", err, rc, c.rc3)
			}
			if got := s.Broker().Stats().AuthRefused[c.reason] - before; got != 2 {
				t.Fatalf("Stats.AuthRefused[%s] grew by %d, want 2", c.reason, got)
			}
		})
	}
	// The right password gets in, on both versions.
	connect5ok := func(user, pw string) {
		if _, err := dial5(t, s.Addr, login5(user+"-5", user, pw), nil); err != nil {
			t.Fatalf("%s with the right password: %v", user, err)
		}
	}
	connect5ok("alice", "wonderland")
	if _, _, err := dial3(t, s.Addr, "bob-3", true, creds3("bob", "builder")); err != nil {
		t.Fatalf("bob with the right password (3.1.1): %v", err)
	}
}

func TestAuthFailureDelay(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f, func(o *mqtt.Options) { o.AuthFailureDelay = 400 * time.Millisecond })
	start := time.Now()
	if _, err := dial5(t, s.Addr, login5("d", "nobody", "x"), nil); err == nil {
		t.Fatal("unknown user accepted")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("refusal answered after %v, want at least the 400ms failure delay", d)
	}
	// A flood of bad attempts is refused, each after the delay, while a
	// connected session goes on exchanging messages.
	alice := connect5as(t, s.Addr, "alice-ok", "alice", "wonderland")
	alice.sub("alice/#", 1)
	var wg sync.WaitGroup
	codes := make(chan byte, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := dial5(t, s.Addr, login5(fmt.Sprint("f", i), "alice", "guess"), nil)
			if c != nil && c.ack != nil {
				codes <- c.ack.ReasonCode
			}
		}()
	}
	for i := range 20 {
		alice.pub("alice/ping", 1, false, fmt.Sprint(i))
		alice.expectOne("alice/ping", fmt.Sprint(i))
	}
	wg.Wait()
	close(codes)
	n, bad := 0, 0
	for rc := range codes {
		switch rc {
		case 0x86:
			bad++
		case 0x89: // no hashing slot in time: refused as busy, still no entry
		default:
			t.Fatalf("flood attempt refused with %#x, want 0x86 (or 0x89 when busy)", rc)
		}
		n++
	}
	if n != 16 || bad == 0 {
		t.Fatalf("%d of 16 flood attempts got a CONNACK, %d of them 0x86", n, bad)
	}
}

func TestAuthAllowAnonymous(t *testing.T) {
	f, _, _ := authFiles(t, testACL, true)
	s := startSecured(t, f)
	anon, err := dial5(t, s.Addr, login5("anon", "", ""), nil)
	if err != nil {
		t.Fatalf("anonymous with AllowAnonymous: %v", err)
	}
	// Anonymous clients get the rules before the first user line.
	sa, err := anon.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "public/#", QoS: 1}, {Topic: "alice/#", QoS: 1}}})
	if sa == nil || sa.Reasons[0] != 1 || sa.Reasons[1] != 0x87 {
		t.Fatalf("anonymous SUBACK %v %v, want [1 0x87]", sa, err)
	}
	if _, err := dial5(t, s.Addr, login5("x", "alice", "bad"), nil); err == nil {
		t.Fatal("a wrong password is accepted where anonymous clients are")
	}
}

func TestACLPublishForbiddenNotDelivered(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	watch := connect5as(t, s.Addr, "alice-w", "alice", "wonderland")
	watch.sub("alice/#", 1)
	bob := connect5as(t, s.Addr, "bob-1", "bob", "builder")
	for _, qos := range []byte{1, 2} {
		r, err := bob.Publish(ctxT(t), &paho.Publish{Topic: "alice/status", QoS: qos, Payload: []byte("forged")})
		if r == nil || r.ReasonCode != 0x87 {
			t.Fatalf("QoS %d publish to a read-only topic: %v %+v, want reason 0x87", qos, err, r)
		}
	}
	if _, err := bob.Publish(ctxT(t), &paho.Publish{Topic: "alice/status", QoS: 0, Payload: []byte("forged")}); err != nil {
		t.Fatal(err)
	}
	// 3.1.1: acknowledged and dropped.
	bob3, _, err := dial3(t, s.Addr, "bob-3", true, creds3("bob", "builder"))
	if err != nil {
		t.Fatal(err)
	}
	for _, qos := range []byte{0, 1, 2} {
		if tok := bob3.Publish("alice/status", qos, false, "forged3"); !tok.WaitTimeout(wait) || tok.Error() != nil {
			t.Fatalf("3.1.1 QoS %d publish not acknowledged: %v", qos, tok.Error())
		}
	}
	bob.pub("bob/ok", 1, false, "fine") // the connection still works
	watch.pub("alice/status", 1, false, "real")
	watch.expectOne("alice/status", "real")
	watch.expectNone(300 * time.Millisecond)
	if d := s.Broker().Stats().Denied["write"]; d != 6 {
		t.Fatalf("Stats.Denied[write] = %d, want 6", d)
	}
}

func TestACLSubscribeForbidden(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	bob := connect5as(t, s.Addr, "bob-1", "bob", "builder")
	sa, err := bob.Subscribe(ctxT(t), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "alice/#", QoS: 1}, {Topic: "alice/status", QoS: 1}, {Topic: "#", QoS: 0},
		{Topic: "$share/g/alice/#", QoS: 1}, {Topic: "$share/g/jobs/#", QoS: 1}, {Topic: "devices/alice/x", QoS: 0}, {Topic: "devices/bob/+", QoS: 0},
	}})
	want := []byte{0x87, 1, 0x87, 0x87, 1, 0x87, 0}
	if sa == nil || string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK %v (%v), want %v", sa, err, want)
	}
	bob3, _, err := dial3(t, s.Addr, "bob-3", true, creds3("bob", "builder"))
	if err != nil {
		t.Fatal(err)
	}
	tok := bob3.Subscribe("alice/#", 1, nil)
	if !tok.WaitTimeout(wait) {
		t.Fatal("3.1.1 SUBACK timed out")
	}
	if got := tok.(*paho3.SubscribeToken).Result()["alice/#"]; got != 0x80 {
		t.Fatalf("3.1.1 forbidden subscription granted %#x, want 0x80", got)
	}
	// What was refused delivers nothing; what was granted works.
	alice := connect5as(t, s.Addr, "alice-1", "alice", "wonderland")
	alice.pub("alice/secret", 1, false, "x")
	alice.pub("alice/status", 1, false, "up")
	bob.expectOne("alice/status", "up")
	bob.expectNone(300 * time.Millisecond)
}

func TestACLClientIDOfAnotherUser(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	alice := connect5as(t, s.Addr, "alice-phone", "alice", "wonderland")
	alice.sub("alice/#", 1)
	cl, err := dial5(t, s.Addr, login5("alice-phone", "bob", "builder"), nil)
	if err == nil || cl.ack == nil || cl.ack.ReasonCode != 0x87 {
		t.Fatalf("bob taking alice's client id: %v %+v, want refused with 0x87", err, cl.ack)
	}
	if _, rc, err := dial3(t, s.Addr, "alice-phone", false, creds3("bob", "builder")); err == nil || rc != 5 {
		t.Fatalf("3.1.1: bob taking alice's client id: %v, return code %d, want 5", err, rc)
	}
	// alice's session was not taken over: she still receives.
	select {
	case d := <-alice.discs:
		t.Fatalf("alice was disconnected (%#x)", d.ReasonCode)
	default:
	}
	alice.pub("alice/x", 1, false, "still here")
	alice.expectOne("alice/x", "still here")
	if _, err := dial5(t, s.Addr, login5("carol", "bob", "builder"), nil); err == nil {
		t.Fatal("bob used a client id outside his pattern bob-*")
	}
}

func TestACLWillTopic(t *testing.T) {
	f, _, _ := authFiles(t, testACL, false)
	s := startSecured(t, f)
	cp := login5("bob-w", "bob", "builder")
	cp.WillMessage = &paho.WillMessage{Topic: "alice/status", QoS: 1, Payload: []byte("forged will")}
	cl, err := dial5(t, s.Addr, cp, nil)
	if err == nil || cl.ack == nil || cl.ack.ReasonCode != 0x87 {
		t.Fatalf("will on a forbidden topic: %v %+v, want refused with 0x87", err, cl.ack)
	}
	cp.WillMessage.Topic = "bob/status"
	if _, err := dial5(t, s.Addr, cp, nil); err != nil {
		t.Fatalf("will on an allowed topic: %v", err)
	}
}

// readOnly is an Authorizer an application could write: subscribe to
// anything, read only open/.
type readOnly struct{}

func (readOnly) Allow(_ context.Context, _ mqtt.Identity, a mqtt.Access, name string) bool {
	return a != mqtt.AccessRead || strings.HasPrefix(name, "open/")
}

func TestAuthorizerReadOnRetainedAndLive(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.Authorizer = readOnly{} })
	pub := connect5(t, s.Addr, "pub", true, 0)
	pub.pub("open/a", 1, true, "r-open")
	pub.pub("closed/a", 1, true, "r-closed")
	sub := connect5(t, s.Addr, "sub", true, 0)
	sub.sub("+/a", 0)
	sub.expectOne("open/a", "r-open") // the retained closed/a is withheld
	pub.pub("closed/a", 0, false, "live-closed")
	pub.pub("open/a", 0, false, "live-open")
	sub.expectOne("open/a", "live-open")
	sub.expectNone(300 * time.Millisecond)
	// QoS 1 messages come through the message log: the same check.
	q1 := connect5(t, s.Addr, "sub-q1", true, 0)
	q1.sub("+/b", 1)
	pub.pub("closed/b", 1, false, "log-closed")
	pub.pub("open/b", 1, false, "log-open")
	q1.expectOne("open/b", "log-open")
	q1.expectNone(300 * time.Millisecond)
	if s.Broker().Stats().Denied["read"] < 3 {
		t.Fatalf("Stats.Denied[read] = %d, want 3 or more", s.Broker().Stats().Denied["read"])
	}
}

func TestAuthReloadUnderLoad(t *testing.T) {
	f, pwPath, aclPath := authFiles(t, testACL, false)
	s := startSecured(t, f)
	sub := connect5as(t, s.Addr, "alice-sub", "alice", "wonderland")
	sub.sub("jobs/#", 1)
	pub := connect5as(t, s.Addr, "alice-pub", "alice", "wonderland")
	// Publishing to jobs/ needs a rule the reloads add.
	if err := os.WriteFile(aclPath, []byte(testACL+"user alice\ntopic write jobs/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	done := make(chan struct{})
	var reloads int
	go func() {
		defer close(done)
		h, _ := bcrypt.GenerateFromPassword([]byte("new"), bcrypt.MinCost)
		for i := 0; ; i++ {
			select {
			case <-sub.t.Context().Done():
				return
			default:
			}
			_ = auth.SetPassword(pwPath, fmt.Sprint("user", i%5), string(h))
			if err := f.Reload(); err != nil {
				t.Errorf("reload: %v", err)
				return
			}
			reloads++
			if reloads >= 50 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for i := range n {
		r, err := pub.Publish(ctxT(t), &paho.Publish{Topic: "jobs/x", QoS: 1, Payload: []byte(fmt.Sprint(i))})
		if err != nil || r.ReasonCode != 0 {
			t.Fatalf("publish %d during reloads: %v %+v", i, err, r)
		}
	}
	<-done
	got := sub.expect(n)
	for i, m := range got {
		if string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: lost or reordered during reloads", i, m.Payload)
		}
	}
	if reloads < 10 {
		t.Fatalf("only %d reloads ran during the load", reloads)
	}
	// A bad file is refused with its line, and the rules in force stay.
	if err := os.WriteFile(aclPath, []byte("user alice\ntopic wirte jobs/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := f.Reload()
	var le *auth.LineError
	if !errors.As(err, &le) || le.Line != 2 || le.File != aclPath {
		t.Fatalf("reload of a bad ACL: %v, want an error at %s:2", err, aclPath)
	}
	pub.pub("jobs/y", 1, false, "after bad reload")
	sub.expectOne("jobs/y", "after bad reload")
	select {
	case d := <-sub.discs:
		t.Fatalf("subscriber disconnected during reloads: %#x", d.ReasonCode)
	default:
	}
}

func TestServerKeepAlive(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxKeepAlive = 20 * time.Second })
	for _, ka := range []uint16{0, 60} {
		c, err := dial5(t, s.Addr, &paho.Connect{ClientID: fmt.Sprint("ka", ka), CleanStart: true, KeepAlive: ka}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.ack.Properties == nil || c.ack.Properties.ServerKeepAlive == nil || *c.ack.Properties.ServerKeepAlive != 20 {
			t.Fatalf("keep alive %d: CONNACK %+v, want Server Keep Alive 20", ka, c.ack.Properties)
		}
	}
	c, err := dial5(t, s.Addr, &paho.Connect{ClientID: "ka10", CleanStart: true, KeepAlive: 10}, nil)
	if err != nil || (c.ack.Properties != nil && c.ack.Properties.ServerKeepAlive != nil) {
		t.Fatalf("keep alive under the cap: %v, CONNACK %+v, want no Server Keep Alive", err, c.ack.Properties)
	}
	if _, rc, err := dial3(t, s.Addr, "ka3", true, func(o *paho3.ClientOptions) { o.SetKeepAlive(60 * time.Second) }); err == nil || rc != 2 {
		t.Fatalf("3.1.1 over the cap: %v, return code %d, want 2", err, rc)
	}
}

func connect5as(t *testing.T, addr, id, user, pw string) *client5 {
	t.Helper()
	c, err := dial5(t, addr, login5(id, user, pw), nil)
	if err != nil {
		t.Fatalf("connect %s as %s: %v", id, user, err)
	}
	return c
}
