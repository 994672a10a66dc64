package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/freeport"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/table"
)

// The fault-injection harness of the qos2 and session suites, in one
// place. Every case talks to a real broker over TCP:
//
//   - in this process (mqtttest.Start), restartable on the same directory
//     and port, with mqtt.Hooks programmed through brokerFaults: holds, delays
//     and failures of commits by kind, and counts of the named points;
//   - in a child process ("mqtt-broker" child mode) for the kill cases:
//     the child opens the engine, the table layer and a broker on a
//     directory and a port, and either is killed by the case with SIGKILL
//     or kills itself at a named point (mqtt.Hooks.At); the case then
//     starts a new child on the same directory and port and reconnects;
//   - as two broker nodes on one store, for the "another server" cases.
//     On an engine that can be shared between processes (JetStream: the
//     second engine connects to the first one's server), node B is a
//     second engine, table layer and broker on the same stream. On the
//     embedded single-writer engines (Pebble, Badger, LMDB) one process
//     owns the store, so node B is a second mqtt.Broker over the same
//     table.DB: two brokers with their own connections, sessions,
//     pipelines and exchange maps, and nothing in common but the store,
//     which is what "another server" means to the QoS 2 design.

// The broker's tables and staging slot ids, for cases that look at or
// corrupt the durable state directly (see package mqtt).
const (
	brokerMsgs     = "mqtt.msgs"
	brokerStaged   = "mqtt.qos2in"
	brokerSessions = "mqtt.sessions"
)

func stagedSlot(client string, pi uint16) string { return fmt.Sprintf("%s\x00%05d", client, pi) }

// quietLogger drops the broker's logs: cases inject failures on purpose.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// needFaults skips a case that injects faults through mqtt.Hooks when the
// build does not call them: such a case would test nothing.
func needFaults(t T, h mqtt.Hooks) {
	if !mqtt.HooksEnabled && (h.At != nil || h.Submit != nil || h.Ack != nil) {
		t.Skipf("injects broker faults: needs a build with -tags faults")
	}
}

// unbounded lifts the queue limit and session expiry the broker has by
// default, unless the case sets them: the suite checks what the protocol
// promises an offline session (every QoS 1/2 message kept, an expiry of
// never honoured), not an operator's limits, which mqtt's own tests
// cover.
func unbounded(opts *mqtt.Options) {
	if opts.MaxQueuedMessages == 0 {
		opts.MaxQueuedMessages = -1
	}
	if opts.SessionExpiry == 0 {
		opts.SessionExpiry = -1
	}
}

// startBroker starts a broker on the target's engine in this process.
func startBroker(t T, tg Target, opts mqtt.Options) *mqtttest.Server {
	t.Helper()
	needFaults(t, opts.Hooks)
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.CheckpointEvery == 0 {
		opts.CheckpointEvery = 100 * time.Millisecond
	}
	unbounded(&opts)
	return mqtttest.StartServer(t, &mqtttest.Server{Engine: tg.Engine, Dir: t.TempDir(), Params: maps.Clone(tg.Params), Opts: opts, Partitions: tg.Partitions})
}

// sharer is implemented by engines whose store another engine instance
// can open as another node (engine/jetstream); an empty URL means this
// instance must stay the store's only writer.
type sharer interface{ ClientURL() string }

// brokerNode is a broker started by secondNode: its address and its
// tables (the same table.DB as the first node's on the embedded engines).
type brokerNode struct {
	Addr string
	DB   *table.DB
}

// secondNode starts broker node B over the store of s's broker. It stops
// before s does.
func secondNode(t T, tg Target, s *mqtttest.Server, opts mqtt.Options) brokerNode {
	t.Helper()
	needFaults(t, opts.Hooks)
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.CheckpointEvery == 0 {
		opts.CheckpointEvery = 100 * time.Millisecond
	}
	unbounded(&opts)
	parts := s.Parts()
	var closers []func() error
	if sh, ok := s.DB().Engine().(sharer); ok && sh.ClientURL() != "" {
		// One engine per partition, each on its partition's server.
		var es []engine.Engine
		for i := range parts.Count() {
			params := maps.Clone(tg.Params)
			if params == nil {
				params = map[string]string{}
			}
			params["url"] = parts.DB(i).Engine().(sharer).ClientURL()
			e, err := engine.Open(t.Context(), tg.Engine, engine.Options{Dir: t.TempDir(), Params: params})
			if err != nil {
				t.Fatalf("open node B's engine of partition %d: %v", i, err)
			}
			es = append(es, e)
			closers = append(closers, e.Close)
		}
		var err error
		parts, err = table.OpenPartitions(t.Context(), es, table.Options{})
		if err != nil {
			for _, c := range closers {
				_ = c()
			}
			t.Fatalf("open node B's tables: %v", err)
		}
		closers = append(closers, parts.Close)
	}
	db := parts.DB(0)
	b, err := mqtt.NewPartitioned(parts, opts)
	if err != nil {
		t.Fatalf("node B: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("node B: listen: %v", err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = b.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = b.Close()
		<-served
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i]()
		}
	})
	return brokerNode{Addr: ln.Addr().String(), DB: db}
}

// brokerFaults programs a broker's mqtt.Hooks from a case: At is
// counted and passed to onAt; Submit is counted and held by holdSubmits;
// Ack hands the pipeline the hold of holdAcks, or a delay, and the error
// of failAcks.
type brokerFaults struct {
	at      *points[mqtt.Point]
	submits *points[mqtt.Kind]
	acks    *points[mqtt.Kind]

	mu       sync.Mutex
	ackDelay map[mqtt.Kind]func() time.Duration
	ackFail  func(k mqtt.Kind, client string) error
	onAt     func(p mqtt.Point, client string, pi uint16)
}

func newBrokerFaults() *brokerFaults {
	return &brokerFaults{at: newPoints[mqtt.Point](), submits: newPoints[mqtt.Kind](), acks: newPoints[mqtt.Kind](),
		ackDelay: map[mqtt.Kind]func() time.Duration{}}
}

func (f *brokerFaults) hooks() mqtt.Hooks {
	return mqtt.Hooks{
		At: func(p mqtt.Point, client string, pi uint16) {
			f.at.hit(p)
			f.mu.Lock()
			on := f.onAt
			f.mu.Unlock()
			if on != nil {
				on(p, client, pi)
			}
		},
		Submit: func(k mqtt.Kind, client string) { f.submits.hit(k) },
		Ack: func(k mqtt.Kind, client string) (<-chan struct{}, error) {
			f.mu.Lock()
			delay := f.ackDelay[k]
			fail := f.ackFail
			f.mu.Unlock()
			var err error
			if fail != nil {
				err = fail(k, client)
			}
			hold := f.acks.holding(k)
			if hold == nil && delay != nil {
				if d := delay(); d > 0 {
					ch := make(chan struct{})
					time.AfterFunc(d, func() { close(ch) })
					hold = ch
				}
			}
			return hold, err
		},
	}
}

// holdAcks makes commits of kind k look stalled to the pipeline until the
// returned release is called.
func (f *brokerFaults) holdAcks(k mqtt.Kind) (release func()) { return f.acks.holdAt(k) }

// holdSubmits holds every commit of kind k before it is submitted until
// the returned release is called.
func (f *brokerFaults) holdSubmits(k mqtt.Kind) (release func()) { return f.submits.holdAt(k) }

// delayAcks delays the pipeline's view of each commit of kind k by d().
func (f *brokerFaults) delayAcks(k mqtt.Kind, d func() time.Duration) {
	f.mu.Lock()
	f.ackDelay[k] = d
	f.mu.Unlock()
}

func (f *brokerFaults) failAcks(fn func(k mqtt.Kind, client string) error) {
	f.mu.Lock()
	f.ackFail = fn
	f.mu.Unlock()
}

func (f *brokerFaults) count(p mqtt.Point) int { return f.at.count(p) }

// submitted returns how many commits of kind k were submitted.
func (f *brokerFaults) submitted(k mqtt.Kind) int { return f.submits.count(k) }

// waitHeld waits until a Submit hold stopped a commit of kind k.
func (f *brokerFaults) waitHeld(t T, k mqtt.Kind) {
	t.Helper()
	f.submits.waitHeld(t, k)
}

// ---- a broker in a child process ----

func init() {
	childModes["mqtt-broker"] = childMQTTBroker
}

// brokerArgs tell a child broker where to listen and where to die; they
// are written next to the engine directory.
type brokerArgs struct {
	Addr string `json:"addr"`
	// Kill, when set, is the point at which the child kills itself with
	// SIGKILL: the KillNth time (default 1) it is reached for KillClient
	// (and KillPI, when not 0).
	Kill       mqtt.Point `json:"kill,omitempty"`
	KillClient string     `json:"kill_client,omitempty"`
	KillPI     uint16     `json:"kill_pi,omitempty"`
	KillNth    int        `json:"kill_nth,omitempty"`
	// CheckpointEvery is the broker's checkpoint period in milliseconds.
	CheckpointEvery int `json:"checkpoint_every,omitempty"`
	// Partitions splits the store over that many engines, in the
	// directories mqtttest.PartitionDir names (Target.Partitions).
	Partitions int `json:"partitions,omitempty"`
}

func brokerArgsPath(dir string) string { return strings.TrimRight(dir, "/") + ".broker.json" }

func childMQTTBroker(spec childSpec) error {
	raw, err := os.ReadFile(brokerArgsPath(spec.Dir))
	if err != nil {
		return err
	}
	var a brokerArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return err
	}
	ctx := context.Background()
	n := max(a.Partitions, 1)
	var es []engine.Engine
	for i := range n {
		e, err := engine.Open(ctx, spec.Engine, engine.Options{Dir: mqtttest.PartitionDir(spec.Dir, i, n), Params: spec.Params})
		if err != nil {
			return err
		}
		es = append(es, e)
	}
	parts, err := table.OpenPartitions(ctx, es, table.Options{})
	if err != nil {
		return err
	}
	opts := mqtt.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	unbounded(&opts)
	if a.CheckpointEvery > 0 {
		opts.CheckpointEvery = time.Duration(a.CheckpointEvery) * time.Millisecond
	}
	if a.Kill != "" {
		var hits atomic.Int64
		nth := int64(max(a.KillNth, 1))
		opts.Hooks.At = func(p mqtt.Point, client string, pi uint16) {
			if p == a.Kill && client == a.KillClient && (a.KillPI == 0 || pi == a.KillPI) && hits.Add(1) == nth {
				killSelf()
			}
		}
	}
	b, err := mqtt.NewPartitioned(parts, opts)
	if err != nil {
		return err
	}
	var ln net.Listener
	for i := 0; ; i++ {
		if ln, err = net.Listen("tcp", a.Addr); err == nil || i == 100 {
			break
		}
		time.Sleep(50 * time.Millisecond) // the killed child's port is being released
	}
	if err != nil {
		return err
	}
	fmt.Printf("ready %s\n", ln.Addr())
	go func() { _ = b.Serve(ln) }()
	time.Sleep(2 * time.Minute) // nobody killed us: the parent is gone
	return nil
}

// brokerChild is a broker in a child process.
type brokerChild struct {
	t    T
	c    *child
	Addr string
	dir  string
}

// startBrokerChild starts a child broker on dir, listening on a.Addr
// (a free loopback port when empty), and waits until it serves.
func startBrokerChild(t T, tg Target, dir string, a brokerArgs) *brokerChild {
	t.Helper()
	if a.Kill != "" {
		needFaults(t, mqtt.Hooks{At: func(mqtt.Point, string, uint16) {}})
	}
	if a.Addr == "" {
		// Below the ephemeral range: a restart on the same address never
		// finds a client's local port on it.
		a.Addr = freeport.MustAddr(t)
	}
	if a.CheckpointEvery == 0 {
		a.CheckpointEvery = 100
	}
	a.Partitions = tg.Partitions
	raw, _ := json.Marshal(a)
	if err := os.WriteFile(brokerArgsPath(dir), raw, 0o644); err != nil {
		t.Fatalf("write broker args: %v", err)
	}
	c := startChild(t, childSpec{Mode: "mqtt-broker", Engine: tg.Engine, Dir: dir, Params: tg.Params})
	ready := make(chan string, 1)
	go func() {
		for l := range c.lines {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "ready" {
				ready <- f[1]
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			<-c.Exited()
			t.Fatalf("child broker ended before serving (%v): %s", c.Err(), c.stderr())
		}
		return &brokerChild{t: t, c: c, Addr: addr, dir: dir}
	case <-time.After(60 * time.Second):
		c.kill()
		t.Fatalf("child broker did not serve within 60s: %s", c.stderr())
	}
	return nil
}

// kill ends the child with SIGKILL now.
func (b *brokerChild) kill() { b.c.kill() }

// waitKilledItself waits until the child died at its kill point.
func (b *brokerChild) waitKilledItself() {
	b.t.Helper()
	select {
	case <-b.c.Exited():
		if err := b.c.Err(); !killedBySignal(err) {
			b.t.Fatalf("child broker was to kill itself, it ended with %v: %s", err, b.c.stderr())
		}
	case <-time.After(waitFor):
		b.c.kill()
		b.t.Fatalf("child broker did not reach its kill point within %v", waitFor)
	}
}

// restart starts a new child broker on the same directory and address.
func (b *brokerChild) restart(tg Target, a brokerArgs) *brokerChild {
	b.t.Helper()
	a.Addr = b.Addr
	return startBrokerChild(b.t, tg, b.dir, a)
}

// openStore opens the tables in dir (no broker may run on it) and closes
// them when the case ends, or earlier with the returned func.
func openStore(t T, tg Target, dir string) (*table.DB, func()) {
	t.Helper()
	e, err := tg.TryOpen(t.Context(), dir)
	if err != nil {
		t.Fatalf("open %s in %s: %v", tg.Engine, dir, err)
	}
	db, err := table.Open(t.Context(), e, table.Options{})
	if err != nil {
		e.Close()
		t.Fatalf("open tables: %v", err)
	}
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			_ = db.Close()
			_ = e.Close()
		})
	}
	t.Cleanup(closeFn)
	return db, closeFn
}

// logMessages returns the payloads of the messages in the broker's log
// on topic, in log order.
func logMessages(t T, db *table.DB, topic string) []string {
	t.Helper()
	return mqtttest.LogPayloads(t, t.Context(), db, topic)
}

// stagedAbsent reports whether the staging slot of (client, pi) is empty.
func stagedAbsent(t T, db *table.DB, client string, pi uint16) bool {
	t.Helper()
	_, err := db.Get(t.Context(), brokerStaged, stagedSlot(client, pi))
	if errors.Is(err, table.ErrNotFound) {
		return true
	}
	if err != nil {
		t.Fatalf("read staging slot: %v", err)
	}
	return false
}

// eventually polls cond every 10 ms until it holds or waitFor passes.
func eventually(t T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
