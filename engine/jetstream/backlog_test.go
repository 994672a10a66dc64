//go:build !nojetstream

package jetstream

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
)

// backlogSize returns how many messages wait behind the offline session
// in TestJetStreamClusterBacklog: 100,000, or 20,000 under the race
// detector, where 100,000 takes longer than the package's time budget
// (the commits that grow with the backlog pass one atomic batch well
// before 20,000).
func backlogSize() int {
	if raceDetector {
		return 20_000
	}
	return 100_000
}

// TestJetStreamClusterBacklog runs a broker on an R3 stream of a
// three-node cluster whose servers take the default 1000 messages per
// atomic batch: a persistent session subscribed at QoS 2 goes offline,
// backlogSize messages (QoS 1, and a share at QoS 2) are published behind
// it, and it reconnects with the default receive maximum (65535 in
// flight) and drains them all; every message arrives, the QoS 2 ones
// exactly once. Then a session with thousands of unacknowledged QoS 2
// deliveries is discarded by a clean start. Both grow the session state a
// commit carries past one atomic batch unless the broker splits it.
func TestJetStreamClusterBacklog(t *testing.T) {
	servers := startCluster(t)
	params := map[string]string{"url": clientURLs(servers), "replicas": "3", "stream": "backlog"}
	var srv *mqtttest.Server
	waitFor(t, 30*time.Second, "a broker on the R3 stream", func() bool {
		// The holder below keeps 3,000 deliveries unacknowledged; the
		// offline session keeps its whole backlog, the default queue
		// limit's size, with no limit.
		s := &mqtttest.Server{Engine: Name, Dir: t.TempDir(), Params: params, Opts: mqtt.Options{MaxInflight: 65535, MaxQueuedMessages: -1}}
		if err := s.Start(); err != nil {
			t.Logf("start broker: %v", err)
			return false
		}
		srv = s
		return true
	})
	t.Cleanup(func() { _ = srv.Stop() })
	if got := engine.MaxCommitEntries(srv.DB().Engine()); got != externalMaxBatch {
		t.Fatalf("MaxCommitEntries = %d, want the server's %d", got, externalMaxBatch)
	}
	ctx := t.Context()
	backlogSize := backlogSize()

	// The session goes offline before the backlog.
	sub := dialBacklog(t, srv.Addr, "drain", false, nil)
	subscribeQoS(t, sub.c, "bl/#", 2)
	sub.close()

	// The backlog: every tenth message at QoS 2.
	start := time.Now()
	publishBacklog(t, srv.Addr, backlogSize)
	t.Logf("published %d messages in %v", backlogSize, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	sub = dialBacklog(t, srv.Addr, "drain", false, nil)
	seen := make([]int, backlogSize)
	got := 0
	deadline := time.NewTimer(10 * time.Minute)
	defer deadline.Stop()
	for got < backlogSize {
		select {
		case m := <-sub.msgs:
			i, err := strconv.Atoi(string(m.Payload))
			if err != nil || i < 0 || i >= backlogSize {
				t.Fatalf("unexpected payload %q on %s", m.Payload, m.Topic)
			}
			if seen[i] == 0 {
				got++
			}
			seen[i]++
			if i%10 == 0 && seen[i] > 1 {
				t.Fatalf("QoS 2 message %d delivered %d times", i, seen[i])
			}
		case err := <-sub.errs:
			t.Fatalf("subscriber failed after %d of %d messages: %v", got, backlogSize, err)
		case <-deadline.C:
			t.Fatalf("drained %d of %d messages", got, backlogSize)
		}
	}
	t.Logf("drained %d messages in %v", got, time.Since(start).Round(time.Millisecond))
	sub.close()

	// A session holding thousands of QoS 2 deliveries it never
	// acknowledged (their records stay in the store), then discarded.
	const held = 3000
	acks := dialBacklog(t, srv.Addr, "holder", false, func(cfg *paho.ClientConfig) { cfg.EnableManualAcknowledgment = true })
	subscribeQoS(t, acks.c, "held/#", 2)
	pub := dialBacklog(t, srv.Addr, "held-pub", true, nil)
	for i := range held {
		if _, err := pub.c.Publish(ctx, &paho.Publish{Topic: "held/x", QoS: 2, Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("publish held %d: %v", i, err)
		}
	}
	pub.close()
	for i := range held {
		select {
		case <-acks.msgs:
		case <-time.After(time.Minute):
			t.Fatalf("holder received %d of %d", i, held)
		}
	}
	acks.close()
	if n := outboundQoS2(t, srv, "holder"); n < held {
		t.Fatalf("holder has %d QoS 2 deliveries in flight in the store, want %d", n, held)
	}
	clean := dialBacklog(t, srv.Addr, "holder", true, nil)
	clean.close()
	if n := outboundQoS2(t, srv, "holder"); n != 0 {
		t.Fatalf("after the clean start the holder still has %d QoS 2 deliveries in the store", n)
	}
}

// backlogClient is a paho.golang client that queues what it receives.
type backlogClient struct {
	c    *paho.Client
	msgs chan *paho.Publish
	errs chan error
}

func (b *backlogClient) close() {
	done := b.c.Done()
	_ = b.c.Disconnect(&paho.Disconnect{})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// dialBacklog connects a 5.0 client with a one-hour session expiry
// (none with clean), without a receive maximum of its own (65535).
func dialBacklog(t *testing.T, addr, id string, clean bool, edit func(*paho.ClientConfig)) *backlogClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	b := &backlogClient{msgs: make(chan *paho.Publish, 1<<17), errs: make(chan error, 4)}
	cfg := paho.ClientConfig{
		ClientID: id,
		Conn:     nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			b.msgs <- pr.Packet
			return true, nil
		}},
		OnClientError: func(err error) {
			select {
			case b.errs <- err:
			default:
			}
		},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case b.errs <- fmt.Errorf("server disconnect %#x", d.ReasonCode):
			default:
			}
		},
		PacketTimeout: time.Minute,
	}
	if edit != nil {
		edit(&cfg)
	}
	b.c = paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 60}
	if !clean {
		expiry := uint32(3600)
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &expiry}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := b.c.Connect(ctx, cp); err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(b.close)
	return b
}

func subscribeQoS(t *testing.T, c *paho.Client, filter string, qos byte) {
	t.Helper()
	sa, err := c.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != qos {
		t.Fatalf("subscribe %s: %v %+v", filter, err, sa)
	}
}

// publishBacklog publishes payloads 0..n-1 on topics bl/<i%8>, every
// tenth at QoS 2 and the rest at QoS 1, from several clients with many
// publishes in flight each, and fails the test on any refusal.
func publishBacklog(t *testing.T, addr string, n int) {
	t.Helper()
	const clients, inflight = 4, 64
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients*inflight)
	for c := range clients {
		pc := dialBacklog(t, addr, "pub-"+strconv.Itoa(c), true, nil)
		for range inflight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					qos := byte(1)
					if i%10 == 0 {
						qos = 2
					}
					ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
					r, err := pc.c.Publish(ctx, &paho.Publish{Topic: "bl/" + strconv.Itoa(i%8), QoS: qos, Payload: []byte(strconv.Itoa(i))})
					cancel()
					if err == nil && r != nil && r.ReasonCode >= 0x80 {
						err = fmt.Errorf("reason %#x", r.ReasonCode)
					}
					if err != nil {
						errc <- fmt.Errorf("publish %d: %w", i, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// outboundQoS2 returns the QoS 2 deliveries of client's session that the
// store holds in flight.
func outboundQoS2(t *testing.T, srv *mqtttest.Server, client string) int {
	t.Helper()
	ss, err := mqtt.Sessions(t.Context(), srv.DB())
	if err != nil {
		t.Fatalf("list sessions: %v", err)
	}
	for _, s := range ss {
		if s.ClientID == client {
			return s.OutboundQoS2
		}
	}
	return 0
}
