package mqtt_test

// The helpers every broker test shares: a broker on a real engine, paho
// clients for 5.0 (paho.golang) and 3.1.1 (paho.mqtt.golang), a raw client
// over the packet codec for what real clients will not send, and a broker
// in a child process that a test can SIGKILL.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paho3 "github.com/eclipse/paho.mqtt.golang"

	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// testEngine runs every test but the all-engine ones: Pebble, or the
// engine TIDEMARK_MQTT_ENGINE names.
var testEngine = cmp.Or(os.Getenv("TIDEMARK_MQTT_ENGINE"), "pebble")

// wait bounds every wait for something that should happen.
const wait = 10 * time.Second

func TestMain(m *testing.M) {
	maybeRunBrokerChild()
	os.Exit(m.Run())
}

// testPartitions splits the store of the brokers startBroker starts over
// that many partitions, when TIDEMARK_MQTT_PARTITIONS sets it above 1: a
// way to run the tests on a split store. Tests that read the store
// directly, or use what a split store refuses, then fail for that.
var testPartitions, _ = strconv.Atoi(os.Getenv("TIDEMARK_MQTT_PARTITIONS"))

// startBroker starts a broker on testEngine; edit adjusts its options.
func startBroker(t *testing.T, edit ...func(*mqtt.Options)) *mqtttest.Server {
	t.Helper()
	var o mqtt.Options
	for _, f := range edit {
		f(&o)
	}
	return mqtttest.StartServer(t, &mqtttest.Server{Engine: testEngine, Dir: t.TempDir(), Opts: o, Partitions: testPartitions})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func u32(v uint32) *uint32 { return &v }
func u16(v uint16) *uint16 { return &v }

// ---- MQTT 5.0: paho.golang ----

// client5 is a connected paho.golang client that queues what it receives.
type client5 struct {
	*paho.Client
	t     *testing.T
	ack   *paho.Connack
	msgs  chan *paho.Publish
	discs chan *paho.Disconnect
	errs  chan error
}

// dial5 connects a 5.0 client with cp; edit adjusts the client config. It
// returns the CONNACK error instead of failing, for tests of refusals.
func dial5(t *testing.T, addr string, cp *paho.Connect, edit func(*paho.ClientConfig)) (*client5, error) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		return nil, err
	}
	return connectOn5(t, nc, cp, edit)
}

// connectOn5 is dial5 over a connection the caller opened. paho.golang
// writes a packet in several writes and serializes its writers (the
// pinger sends its first PINGREQ right after the CONNACK) only on a
// connection that is a sync.Locker: a TCP socket sends the writes in one
// writev, but on any other connection (TLS: one record per write) a
// PINGREQ could land inside another packet, so those must be wrapped
// with packets.NewThreadSafeConn.
func connectOn5(t *testing.T, nc net.Conn, cp *paho.Connect, edit func(*paho.ClientConfig)) (*client5, error) {
	t.Helper()
	c := &client5{t: t, msgs: make(chan *paho.Publish, 4096), discs: make(chan *paho.Disconnect, 4), errs: make(chan error, 16)}
	cfg := paho.ClientConfig{
		ClientID: cp.ClientID,
		Conn:     nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { c.discs <- d },
		OnClientError: func(err error) {
			select {
			case c.errs <- err:
			default:
			}
		},
		PacketTimeout: wait,
	}
	if edit != nil {
		edit(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ack, err := c.Connect(ctxT(t), cp)
	c.ack = ack
	if err != nil {
		return c, err
	}
	t.Cleanup(func() { c.close() })
	return c, nil
}

// connect5 connects a 5.0 client or fails the test. expiry is the
// session expiry interval (0: the session ends with the connection).
func connect5(t *testing.T, addr, id string, clean bool, expiry uint32) *client5 {
	t.Helper()
	cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30}
	if expiry > 0 {
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: u32(expiry)}
	}
	c, err := dial5(t, addr, cp, nil)
	if err != nil {
		t.Fatalf("connect %q: %v", id, err)
	}
	return c
}

// close disconnects normally; a client already gone is fine.
func (c *client5) close() {
	done := c.Done()
	_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// sub subscribes to one filter and checks the granted QoS.
func (c *client5) sub(filter string, qos byte) {
	c.t.Helper()
	c.subOpts(nil, paho.SubscribeOptions{Topic: filter, QoS: qos})
}

// subOpts subscribes with full options (and a subscription id when id is
// not nil) and checks every subscription was granted its QoS.
func (c *client5) subOpts(id *int, opts ...paho.SubscribeOptions) {
	c.t.Helper()
	s := &paho.Subscribe{Subscriptions: opts}
	if id != nil {
		s.Properties = &paho.SubscribeProperties{SubscriptionIdentifier: id}
	}
	sa, err := c.Subscribe(ctxT(c.t), s)
	if err != nil {
		c.t.Fatalf("subscribe %v: %v", opts, err)
	}
	for i, rc := range sa.Reasons {
		if rc != opts[i].QoS {
			c.t.Fatalf("subscribe %q: reason %#x, want granted QoS %d", opts[i].Topic, rc, opts[i].QoS)
		}
	}
}

// pub publishes and waits for the acknowledgement (QoS 1 and 2).
func (c *client5) pub(topic string, qos byte, retain bool, payload string) {
	c.t.Helper()
	c.pubP(&paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
}

func (c *client5) pubP(p *paho.Publish) *paho.PublishResponse {
	c.t.Helper()
	r, err := c.Publish(ctxT(c.t), p)
	if err != nil {
		c.t.Fatalf("publish %q: %v", p.Topic, err)
	}
	if r != nil && r.ReasonCode >= 0x80 {
		c.t.Fatalf("publish %q: reason %#x", p.Topic, r.ReasonCode)
	}
	return r
}

// expect returns the next n messages or fails.
func (c *client5) expect(n int) []*paho.Publish {
	c.t.Helper()
	var got []*paho.Publish
	deadline := time.After(wait)
	for len(got) < n {
		select {
		case m := <-c.msgs:
			got = append(got, m)
		case <-deadline:
			c.t.Fatalf("%s: got %d messages, want %d: %v", c.ClientID(), len(got), n, topics5(got))
		}
	}
	return got
}

// expectOne returns the next message and checks its topic and payload.
func (c *client5) expectOne(topic, payload string) *paho.Publish {
	c.t.Helper()
	m := c.expect(1)[0]
	if m.Topic != topic || string(m.Payload) != payload {
		c.t.Fatalf("%s: got %q %q, want %q %q", c.ClientID(), m.Topic, m.Payload, topic, payload)
	}
	return m
}

// expectNone checks nothing arrives for d.
func (c *client5) expectNone(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("%s: unexpected message %q %q", c.ClientID(), m.Topic, m.Payload)
	case <-time.After(d):
	}
}

// expectDisconnect waits for a server DISCONNECT and returns its reason.
func (c *client5) expectDisconnect() byte {
	c.t.Helper()
	select {
	case d := <-c.discs:
		return d.ReasonCode
	case <-time.After(wait):
		c.t.Fatalf("%s: no DISCONNECT from the server", c.ClientID())
		return 0
	}
}

func topics5(ms []*paho.Publish) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.Topic+"="+string(m.Payload))
	}
	return s
}

// ---- MQTT 3.1.1: paho.mqtt.golang ----

// client3 is a connected paho.mqtt.golang client; messages of every
// subscription go to msgs.
type client3 struct {
	paho3.Client
	t       *testing.T
	id      string
	present bool
	msgs    chan paho3.Message
}

// dial3 connects a 3.1.1 client; edit adjusts the options. It returns the
// CONNACK return code on refusal.
func dial3(t *testing.T, addr, id string, clean bool, edit func(*paho3.ClientOptions)) (*client3, byte, error) {
	t.Helper()
	c := &client3{t: t, id: id, msgs: make(chan paho3.Message, 4096)}
	o := paho3.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(true).
		SetConnectTimeout(wait).SetKeepAlive(30 * time.Second).SetWriteTimeout(wait).
		SetDefaultPublishHandler(func(_ paho3.Client, m paho3.Message) { c.msgs <- m })
	if edit != nil {
		edit(o)
	}
	c.Client = paho3.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(wait) {
		return nil, 0, errors.New("connect timed out")
	}
	ct := tok.(*paho3.ConnectToken)
	if err := tok.Error(); err != nil {
		return nil, ct.ReturnCode(), err
	}
	c.present = ct.SessionPresent()
	t.Cleanup(func() { c.Disconnect(100) })
	return c, 0, nil
}

func connect3(t *testing.T, addr, id string, clean bool) *client3 {
	t.Helper()
	c, _, err := dial3(t, addr, id, clean, nil)
	if err != nil {
		t.Fatalf("connect %q: %v", id, err)
	}
	return c
}

// close disconnects normally (a persistent session is kept).
func (c *client3) close() { c.Disconnect(100) }

func (c *client3) sub(filter string, qos byte) {
	c.t.Helper()
	tok := c.Subscribe(filter, qos, nil)
	if !tok.WaitTimeout(wait) || tok.Error() != nil {
		c.t.Fatalf("subscribe %q: %v", filter, tok.Error())
	}
	key := filter // the library keys a shared subscription's result by its filter alone
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, key, _ = strings.Cut(rest, "/")
	}
	if got := tok.(*paho3.SubscribeToken).Result()[key]; got != qos {
		c.t.Fatalf("subscribe %q: granted %#x, want %d", filter, got, qos)
	}
}

func (c *client3) pub(topic string, qos byte, retain bool, payload string) {
	c.t.Helper()
	tok := c.Publish(topic, qos, retain, payload)
	if !tok.WaitTimeout(wait) || tok.Error() != nil {
		c.t.Fatalf("publish %q: %v", topic, tok.Error())
	}
}

// pubBurst publishes msgs (topic and payload each) one after the other
// without waiting, then waits for every acknowledgement: they enter the
// log in this order.
func (c *client3) pubBurst(qos byte, msgs ...[2]string) {
	c.t.Helper()
	toks := make([]paho3.Token, 0, len(msgs))
	for _, m := range msgs {
		toks = append(toks, c.Publish(m[0], qos, false, m[1]))
	}
	for i, tok := range toks {
		if !tok.WaitTimeout(wait) || tok.Error() != nil {
			c.t.Fatalf("publish %q: %v", msgs[i][0], tok.Error())
		}
	}
}

func (c *client3) expect(n int) []paho3.Message {
	c.t.Helper()
	var got []paho3.Message
	deadline := time.After(wait)
	for len(got) < n {
		select {
		case m := <-c.msgs:
			got = append(got, m)
		case <-deadline:
			c.t.Fatalf("%s: got %d messages, want %d", c.id, len(got), n)
		}
	}
	return got
}

func (c *client3) expectOne(topic, payload string) paho3.Message {
	c.t.Helper()
	m := c.expect(1)[0]
	if m.Topic() != topic || string(m.Payload()) != payload {
		c.t.Fatalf("%s: got %q %q, want %q %q", c.id, m.Topic(), m.Payload(), topic, payload)
	}
	return m
}

// expectResumed is expectOne for a session resumed after close: a message
// delivered before close may come again, marked DUP, first, because close
// can overtake the acknowledgement the client queued for it.
func (c *client3) expectResumed(topic, payload string) paho3.Message {
	c.t.Helper()
	for {
		m := c.expect(1)[0]
		if m.Topic() == topic && string(m.Payload()) == payload {
			return m
		}
		if !m.Duplicate() {
			c.t.Fatalf("%s: got %q %q, want %q %q (or a redelivery)", c.id, m.Topic(), m.Payload(), topic, payload)
		}
	}
}

func (c *client3) expectNone(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("%s: unexpected message %q %q", c.id, m.Topic(), m.Payload())
	case <-time.After(d):
	}
}

// ---- the store ----

// logPayloads returns the payloads of the messages on topic in the
// retained message log.
func logPayloads(t *testing.T, db *table.DB, topic string) []string {
	t.Helper()
	return mqtttest.LogPayloads(t, ctxT(t), db, topic)
}

// ---- raw client over the packet codec ----

// rawClient speaks MQTT packet by packet (mqtttest.Raw), for exchanges a
// real client library hides (withheld acknowledgements, malformed bytes).
type rawClient = mqtttest.Raw

// dialRaw connects a raw client that decodes what the broker sends at
// protocol level v.
func dialRaw(t *testing.T, addr string, v packet.Version) *rawClient {
	t.Helper()
	r := mqtttest.DialRaw(t, t.Name(), addr, v)
	r.Wait = wait
	return r
}

// connectRaw dials and connects at cp's level; it fails unless the
// CONNACK accepts.
func connectRaw(t *testing.T, addr string, cp *packet.Connect) (*rawClient, *packet.Connack) {
	t.Helper()
	r := dialRaw(t, addr, cp.Version)
	return r, r.Connect(cp)
}

// subscribeRaw5 connects a raw 5.0 client id with receive maximum
// receiveMax and a clean start, and subscribes it to filter at QoS 1.
func subscribeRaw5(t *testing.T, addr, id string, receiveMax uint16, filter string) *rawClient {
	t.Helper()
	cp := connect5Packet(id, true, 0)
	cp.Properties.SetReceiveMaximum(receiveMax)
	c, _ := connectRaw(t, addr, cp)
	c.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: 1}}})
	c.Expect(packet.TypeSuback, 1)
	return c
}

func connect5Packet(id string, clean bool, expiry uint32) *packet.Connect {
	cp := &packet.Connect{Version: packet.V5, ClientID: id, CleanStart: clean, KeepAlive: 30}
	if expiry > 0 {
		cp.Properties.SetSessionExpiry(expiry)
	}
	return cp
}

// ---- a broker in a child process ----

const envBrokerChild = "TIDEMARK_MQTT_TEST_BROKER"

type childSpec struct {
	Engine string `json:"engine"`
	Dir    string `json:"dir"`
	Addr   string `json:"addr"`
}

// maybeRunBrokerChild serves a broker and never returns when this test
// binary was started as a broker child; it prints "ready ADDR" once
// serving, and exits after two minutes if nobody kills it.
func maybeRunBrokerChild() {
	raw := os.Getenv(envBrokerChild)
	if raw == "" {
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "broker child:", err)
		os.Exit(2)
	}
	s := &mqtttest.Server{Engine: spec.Engine, Dir: spec.Dir, Addr: spec.Addr}
	if err := s.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "broker child:", err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", s.Addr)
	time.Sleep(2 * time.Minute)
	os.Exit(3)
}

// brokerChild is a broker in a child process.
type brokerChild struct {
	*proc.Proc
	Addr string
}

// startBrokerChild starts a broker on engine in dir at addr ("" for any
// port) in a child process and waits until it serves.
func startBrokerChild(t *testing.T, engine, dir, addr string) *brokerChild {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = freeport.MustAddr(t)
	}
	raw, _ := json.Marshal(childSpec{Engine: engine, Dir: dir, Addr: addr})
	ready := make(chan string, 1)
	p, err := proc.Start(proc.Spec{Name: "broker child", Bin: exe, Args: []string{"-test.run=^$"},
		Env: []string{envBrokerChild + "=" + string(raw)},
		Lines: func(l string) {
			if a, ok := strings.CutPrefix(l, "ready "); ok {
				ready <- a
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	c := &brokerChild{Proc: p}
	t.Cleanup(c.kill)
	select {
	case c.Addr = <-ready:
	case <-p.Exited():
		t.Fatalf("broker child ended before serving (%v): %s", p.Err(), p.Log())
	case <-time.After(30 * time.Second):
		c.kill()
		t.Fatalf("broker child did not start: %s", p.Log())
	}
	return c
}

// kill ends the child with SIGKILL and reaps it.
func (c *brokerChild) kill() { c.Kill() }
