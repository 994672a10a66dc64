package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/internal/proc"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The offline load: a broker with many persistent sessions on disk and
// none connected. It measures what they cost the broker after a restart
// (resident memory, time to start) and what reconnecting one of them
// costs: CONNECT with clean session off, CONNACK with the session
// present, and the one message published to its topic while it was away,
// delivered from its checkpoint without a SUBSCRIBE.
//
// Sessions are stored directly with mqtt.AddOfflineSessions, which
// writes what a CONNECT, a SUBSCRIBE and a disconnect would leave: a
// million devices connecting once at a few thousand a second would take
// most of the run.

// offlineID and offlineTopic name offline device i and its topic.
func offlineID(i int) string    { return fmt.Sprintf("offline-%07d", i) }
func offlineTopic(i int) string { return fmt.Sprintf("fleet/offline/%d", i) }

// seedTidemark stores n offline 3.1.1 persistent sessions, each
// subscribed at QoS 1 to its own topic, in a Tidemark data directory
// (engine eng) with no broker running on it.
func seedTidemark(ctx context.Context, eng, dataDir string, n int) error {
	e, err := engine.Open(ctx, eng, engine.Options{Dir: dataDir, Sync: engine.SyncNone})
	if err != nil {
		return fmt.Errorf("open %s in %s: %w", eng, dataDir, err)
	}
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		e.Close()
		return err
	}
	const chunk = 10000
	batch := make([]mqtt.OfflineSession, 0, chunk)
	for i := 0; i < n && err == nil; i += chunk {
		batch = batch[:0]
		for k := i; k < min(n, i+chunk); k++ {
			batch = append(batch, mqtt.OfflineSession{ClientID: offlineID(k), Version: packet.V311, ExpirySeconds: 0xFFFFFFFF,
				Subscriptions: []topic.Subscription{{Filter: offlineTopic(k), QoS: 1}}})
		}
		err = mqtt.AddOfflineSessions(ctx, db, batch)
	}
	return errors.Join(err, db.Close(), e.Close())
}

// OfflineResult is one broker with a number of offline sessions on disk.
type OfflineResult struct {
	Broker  string
	Offline int
	// Seed is how long storing the sessions took; Start how long the
	// broker took from its restart to accepting connections.
	Seed, Start time.Duration
	// RSS is the broker's resident memory after its start and a few
	// retention passes, RSSAfter after the reconnects.
	RSS, RSSAfter int64
	// Connack and Delivered are, for each sampled reconnect, the time from
	// dialling to the CONNACK (session present) and to the PUBLISH queued
	// while the session was offline.
	Connack, Delivered []time.Duration
	// Settle is how long after its start the broker took to come to rest
	// (see settle) before it was measured.
	Settle time.Duration
	// Redelivered counts messages of an earlier reconnect of the same
	// session that came again (QoS 1 allows it; a session sampled twice
	// may see one whose PUBACK went with the DISCONNECT).
	Redelivered int
	Err         error
}

// OfflineConfig is one offline run.
type OfflineConfig struct {
	// Brokers are the brokers to measure; each needs Seed.
	Brokers []Broker
	// Offline are the numbers of offline sessions to store.
	Offline []int
	// Reconnects is how many sessions, picked at random, reconnect at
	// each size (default 20), one after another.
	Reconnects int
	// Dir holds the brokers' data; Progress, if set, is told each step.
	Dir      string
	Progress func(string)
}

// RunOffline measures every broker at every number of offline sessions,
// one broker process at a time, each on a fresh data directory.
func RunOffline(ctx context.Context, cfg OfflineConfig) []OfflineResult {
	if cfg.Reconnects <= 0 {
		cfg.Reconnects = 20
	}
	say := cfg.Progress
	if say == nil {
		say = func(string) {}
	}
	var out []OfflineResult
	for _, n := range cfg.Offline {
		for i, b := range cfg.Brokers {
			say(fmt.Sprintf("%s, %d offline sessions", b.Name, n))
			dir := filepath.Join(cfg.Dir, fmt.Sprintf("offline-%d-%d", n, i))
			r := runOffline(ctx, b, n, cfg.Reconnects, dir, say)
			r.Broker, r.Offline = b.Name, n
			out = append(out, r)
		}
	}
	return out
}

func runOffline(ctx context.Context, b Broker, n, samples int, dir string, say func(string)) (r OfflineResult) {
	if b.Seed == nil {
		r.Err = fmt.Errorf("%s cannot be loaded with offline sessions", b.Name)
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Err = err
		return r
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	if err := b.Seed(ctx, dir, n); err != nil {
		r.Err = fmt.Errorf("store %d sessions: %w", n, err)
		return r
	}
	r.Seed = time.Since(start)
	say(fmt.Sprintf("  %d sessions stored in %v", n, r.Seed.Round(time.Millisecond)))
	port, err := freeport.Port()
	if err != nil {
		r.Err = err
		return r
	}
	// The first start takes over what the seeding left in the engine's
	// write-ahead log; the broker is measured after a restart, as a
	// broker that ran before is.
	_, first, stop, err := b.Start(ctx, dir, port)
	if err != nil {
		r.Err = err
		return r
	}
	settle(ctx, first)
	if err := stop(); err != nil {
		r.Err = err
		return r
	}
	start = time.Now()
	addr, pid, stop, err := b.Start(ctx, dir, port)
	if err != nil {
		r.Err = err
		return r
	}
	defer func() { _ = stop() }()
	r.Start = time.Since(start)
	// Measure the broker at rest: the engine may still be compacting what
	// the seeding wrote, which slows every commit's sync.
	time.Sleep(3 * time.Second) // retention passes run meanwhile
	r.Settle = settle(ctx, pid) + 3*time.Second
	r.RSS = rss(pid)

	pub, err := dialPublisher(addr)
	if err != nil {
		r.Err = fmt.Errorf("publisher: %w", err)
		return r
	}
	defer pub.nc.Close()
	rng := rand.New(rand.NewPCG(uint64(n), 16))
	for k := range samples {
		i := rng.IntN(n)
		payload := fmt.Sprintf("offline %d sample %05d", i, k) // sorts by sample
		if err := pub.publish(offlineTopic(i), uint16(k+1), []byte(payload)); err != nil {
			r.Err = fmt.Errorf("publish to %s: %w", offlineTopic(i), err)
			return r
		}
		ack, got, again, err := reconnectOffline(addr, offlineID(i), offlineTopic(i), payload)
		if err != nil {
			r.Err = fmt.Errorf("reconnect %s: %w", offlineID(i), err)
			return r
		}
		r.Redelivered += again
		r.Connack, r.Delivered = append(r.Connack, ack), append(r.Delivered, got)
	}
	time.Sleep(time.Second)
	r.RSSAfter = rss(pid)
	say(fmt.Sprintf("  RSS %.1f MB, reconnect p50 %v", float64(r.RSS)/(1<<20), percentile(slices.Clone(r.Delivered), 0.5)))
	return r
}

// publisher is one clean 3.1.1 connection publishing at QoS 1, one
// message at a time.
type publisher struct {
	nc net.Conn
	rd *packet.Reader
}

func dialPublisher(addr string) (*publisher, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: "offline-pub", CleanStart: true}).Append(nil, packet.V311)
	if _, err := nc.Write(out); err != nil {
		nc.Close()
		return nil, err
	}
	rd := packet.NewReader(bufio.NewReader(nc), 0)
	rd.SetVersion(packet.V311)
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if p, err := rd.ReadPacket(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("CONNACK: %w", err)
	} else if ack, ok := p.(*packet.Connack); !ok || ack.ReasonCode != 0 {
		nc.Close()
		return nil, fmt.Errorf("got %v, want CONNACK 0", p)
	}
	return &publisher{nc: nc, rd: rd}, nil
}

// publish sends one QoS 1 message and waits for its PUBACK: once it
// returns, the message is in the log for the offline session.
func (p *publisher) publish(topic string, pi uint16, payload []byte) error {
	_ = p.nc.SetDeadline(time.Now().Add(30 * time.Second))
	out, _ := (&packet.Publish{Topic: topic, QoS: 1, PacketID: pi, Payload: payload}).Append(nil, packet.V311)
	if _, err := p.nc.Write(out); err != nil {
		return err
	}
	pk, err := p.rd.ReadPacket()
	if err != nil {
		return fmt.Errorf("PUBACK: %w", err)
	}
	if a, ok := pk.(*packet.Puback); !ok || a.PacketID != pi {
		return fmt.Errorf("got %v, want PUBACK %d", pk, pi)
	}
	return nil
}

// settle waits until the process pid uses less than 5% of a core over a
// second, for at most 2 minutes, and returns how long it waited.
func settle(ctx context.Context, pid int) time.Duration {
	start := time.Now()
	last := proc.CPU(pid)
	for time.Since(start) < 2*time.Minute && ctx.Err() == nil {
		time.Sleep(time.Second)
		now := proc.CPU(pid)
		if now-last < 50*time.Millisecond {
			break
		}
		last = now
	}
	return time.Since(start)
}

// reconnectOffline connects as client with clean session off, expects
// its session present and the queued message, acknowledges it and
// disconnects; it returns the times from dialling to the CONNACK and to
// the message, and how many messages of an earlier reconnect came first.
func reconnectOffline(addr, client, topic, payload string) (connack, delivered time.Duration, again int, err error) {
	start := time.Now()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, 0, 0, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(start.Add(30 * time.Second))
	out, _ := (&packet.Connect{Version: packet.V311, ClientID: client}).Append(nil, packet.V311)
	if _, err := nc.Write(out); err != nil {
		return 0, 0, 0, err
	}
	rd := packet.NewReader(bufio.NewReaderSize(nc, 512), 0)
	rd.SetVersion(packet.V311)
	p, err := rd.ReadPacket()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("CONNACK: %w", err)
	}
	if ack, ok := p.(*packet.Connack); !ok || ack.ReasonCode != 0 || !ack.SessionPresent {
		return 0, 0, 0, fmt.Errorf("got %v, want CONNACK with the session present", p)
	}
	connack = time.Since(start)
	for {
		p, err = rd.ReadPacket()
		if err != nil {
			return 0, 0, again, fmt.Errorf("queued PUBLISH: %w", err)
		}
		pub, ok := p.(*packet.Publish)
		if !ok {
			continue
		}
		earlier := pub.Topic == topic && strings.HasPrefix(string(pub.Payload), "offline ") && string(pub.Payload) < payload
		if pub.Topic != topic || (string(pub.Payload) != payload && !earlier) {
			return 0, 0, again, fmt.Errorf("got %q on %q, want %q on %q", pub.Payload, pub.Topic, payload, topic)
		}
		out, _ = (&packet.Puback{PacketID: pub.PacketID}).Append(out[:0], packet.V311)
		if earlier {
			again++
			if _, err := nc.Write(out); err != nil {
				return 0, 0, again, err
			}
			continue
		}
		delivered = time.Since(start)
		out, _ = (&packet.Disconnect{}).Append(out, packet.V311)
		_, err = nc.Write(out)
		return connack, delivered, again, err
	}
}

// OfflineTable renders offline results, one row per broker and number of
// offline sessions, with each figure's ratio to the same broker's row with
// the fewest sessions.
func OfflineTable(rs []OfflineResult) string {
	var b strings.Builder
	base := map[string]OfflineResult{}
	for _, r := range rs {
		if m, ok := base[r.Broker]; r.Err == nil && (!ok || r.Offline < m.Offline) {
			base[r.Broker] = r
		}
	}
	fmt.Fprintf(&b, "| broker | offline sessions | stored in | start | at rest after | RSS MB | RSS MB after reconnects | reconnect to CONNACK p50 | reconnect to message p50 | max | redelivered |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	ratio := func(v, m float64) string {
		if m == 0 || v == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2fx)", v/m)
	}
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | %d | failed: %v |\n", r.Broker, r.Offline, r.Err)
			continue
		}
		m := base[r.Broker]
		if m.Offline == r.Offline {
			m = OfflineResult{}
		}
		ack, got := percentile(slices.Clone(r.Connack), 0.5), percentile(slices.Clone(r.Delivered), 0.5)
		mAck, mGot := percentile(slices.Clone(m.Connack), 0.5), percentile(slices.Clone(m.Delivered), 0.5)
		fmt.Fprintf(&b, "| %s | %d | %v | %v%s | %v | %.1f%s | %.1f%s | %v%s | %v%s | %v | %d |\n",
			r.Broker, r.Offline, r.Seed.Round(time.Millisecond), r.Start.Round(time.Millisecond), ratio(float64(r.Start), float64(m.Start)),
			r.Settle.Round(time.Second),
			float64(r.RSS)/(1<<20), ratio(float64(r.RSS), float64(m.RSS)),
			float64(r.RSSAfter)/(1<<20), ratio(float64(r.RSSAfter), float64(m.RSSAfter)),
			ack.Round(10*time.Microsecond), ratio(float64(ack), float64(mAck)),
			got.Round(10*time.Microsecond), ratio(float64(got), float64(mGot)),
			percentile(slices.Clone(r.Delivered), 1).Round(10*time.Microsecond), r.Redelivered)
	}
	b.WriteString("\nRatios in brackets are against the same broker with the fewest offline sessions (1.00x: no growth).\n")
	return b.String()
}
