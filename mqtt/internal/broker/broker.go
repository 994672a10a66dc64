// Package broker is the core of Tidemark's MQTT broker (package mqtt is
// its public face): the broker over its table.DB and the connections it
// serves, each with its packet loop, its pipeline of acknowledgements,
// its session's setup, takeover and teardown, its will, and the QoS 1/2
// state machines of what it receives. A session's sending side is package
// delivery; its stored state and indexes package session; routing package
// route; socket admission package admit; offline queue limits package
// queuelimit. See package mqtt for the guarantees.
package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/access"
	"github.com/tidemark-io/tidemark/mqtt/internal/admit"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
	"github.com/tidemark-io/tidemark/mqtt/internal/queuelimit"
	"github.com/tidemark-io/tidemark/mqtt/internal/retention"
	"github.com/tidemark-io/tidemark/mqtt/internal/route"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/internal/tabletopic"
	"github.com/tidemark-io/tidemark/mqtt/internal/workers"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Table names the broker stores its state in, beside the session tables
// of package mqtt/internal/session (session.Table and its indexes).
const (
	tableMsgs     = message.LogTable // one Message entry per QoS 1/2 publication
	tableRetained = "mqtt.retained"  // id = topic
	tableStaged   = session.StagedTable
	tableOut      = session.OutTable
	tableDone     = session.DoneTable
)

// Options are the broker's options: the fields of mqtt.Options, which
// documents them, in the same order, so that either converts to the
// other.
type Options struct {
	Logger            *slog.Logger
	Hooks             Hooks
	NodeID            string
	TakeoverTimeout   time.Duration
	ReceiveMaximum    int
	MaxInflight       int
	MaxInflightBytes  int64
	MaxPacketSize     int
	TopicAliasMaximum int
	StoreTimeout      time.Duration
	MaxSessionExpiry  time.Duration
	SessionExpiry     time.Duration
	MaxConnections    int
	MaxConnRate       float64
	ConnectTimeout    time.Duration
	MaxTopicLength    int
	MaxTopicLevels    int
	MaxSubscriptions  int
	CheckpointEvery   time.Duration
	KeepAliveGrace    float64
	MaxQueuedMessages int
	MaxQueuedBytes    int64
	RetentionEvery    time.Duration
	RouteQueue        int
	History           time.Duration
	TablesPrefix      string
	Retention         []RetentionRule
	Authenticator     auth.Authenticator
	Authorizer        auth.Authorizer
	AuthConcurrency   int
	AuthFailureDelay  time.Duration
	MaxMemory         int64
	MaxPublishRate    float64
	MaxRetained       int
	MaxKeepAlive      time.Duration
}

func (o *Options) norm() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ReceiveMaximum <= 0 || o.ReceiveMaximum > 65535 {
		o.ReceiveMaximum = 1024
	}
	if o.MaxInflight <= 0 || o.MaxInflight > 65535 {
		o.MaxInflight = 4096
	}
	if o.MaxPacketSize <= 0 {
		o.MaxPacketSize = 1 << 20
	}
	if o.TopicAliasMaximum <= 0 || o.TopicAliasMaximum > 65535 {
		o.TopicAliasMaximum = 64
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 30 * time.Second
	}
	if o.TakeoverTimeout <= 0 {
		o.TakeoverTimeout = 5 * time.Second
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.RetentionEvery <= 0 {
		o.RetentionEvery = 10 * time.Second
	}
	if o.RouteQueue <= 0 {
		o.RouteQueue = 1024
	}
	if o.KeepAliveGrace < 1 {
		o.KeepAliveGrace = 1.5
	}
	o.normLimits()
	if o.AuthFailureDelay == 0 {
		o.AuthFailureDelay = time.Second
	}
}

// Broker is the broker behind mqtt.Broker. It is safe for concurrent use.
type Broker struct {
	// db is the first partition of the store, which holds what concerns
	// the whole broker (see partitions.go); parts all of them, db alone
	// unless the store is split.
	db    *table.DB
	parts *table.Partitions
	opts  Options
	log   *slog.Logger
	// group is how many packets' writes may share one commit: maxGroup,
	// or 1 on an engine that prefers separate commits.
	group int

	mu        sync.Mutex
	conns     map[string]*conn // online client id -> connection
	listeners []net.Listener
	wills     map[string]*pendingWill // client id -> will waiting for its delay
	closing   bool
	wg        sync.WaitGroup
	// router follows the message log and routes its messages to the
	// online sessions; its index holds their subscriptions, for QoS 0
	// fan-out and shared subscriptions too.
	router *route.Router
	// shares is the view of the shared subscriptions served by several
	// nodes (see sharenodes.go); nil on a single node.
	shares atomic.Pointer[shareView]
	// sharesLeftOut is how many shares the last shares record left out
	// (see encodeShares); the beat's own.
	sharesLeftOut int
	// retains are the retained QoS 0 writes a SUBSCRIBE waits for.
	retains pendingRetains
	// offline are the shared subscriptions of sessions not online here;
	// shareQ the messages for their groups' queues, written after mu is
	// let go, and unsettled how many of each share's are not written yet;
	// shareSeq numbers those without a log position; draining, under mu,
	// the shares whose queue a goroutine is handing over (true: go round
	// once more). See sharequeue.go.
	offline   offlineShares
	shareQ    []queuedShare
	shareSeq  atomic.Uint64
	draining  map[topic.Share]bool
	unsettled map[topic.Share]int // under mu: queue writes not yet done

	// store runs store calls (see onStore); runners run the connections'
	// ack loops and senders.
	store   *workers.Calls
	runners *workers.Pool
	// poller holds the connections waiting for input (see parking); nil
	// where there is none.
	poller *netio.Poller

	metrics counters.Counters
	// retained counts retained messages for Options.MaxRetained.
	retained retainedCount
	history  historyIndex
	// queues keeps Options.MaxQueuedMessages and MaxQueuedBytes;
	// cutting holds, under mu, the clients whose checkpoint it is moving
	// (see beginQueueCut).
	queues  []*queuelimit.Limiter
	cutting map[string]chan struct{}
	// rules locates the messages of Options.Retention's rules (nil
	// without rules).
	rules *retention.Set
	// overBudget is set while the heap exceeds Options.MaxMemory.
	overBudget atomic.Bool
	// stores keep the session records and their indexes, one per
	// partition of the store (see storeFor).
	stores []*session.Store
	// deliv is what the sessions' sending sides share.
	deliv *delivery.Env
	// yields counts the read loops' yields to senders behind the log
	// (see conn.flushGroup).
	yields atomic.Int64
	// gate admits sockets (package admit).
	gate *admit.Gate
	// tables is the table namespace under Options.TablesPrefix.
	tables tabletopic.Space
	// guard is the broker's access control.
	guard *access.Guard

	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a broker storing its state in parts (mqtt.New, with the
// one partition of a DB, and mqtt.NewPartitioned).
func New(parts *table.Partitions, opts Options) (*Broker, error) {
	if parts == nil {
		return nil, errors.New("mqtt: New: nil table.DB")
	}
	db := parts.DB(0)
	if err := checkPartitioned(parts, &opts); err != nil {
		return nil, err
	}
	if opts.MaxPacketSize > MaxPacketSizeLimit {
		return nil, fmt.Errorf("mqtt: New: MaxPacketSize %d: at most %d, so that what a packet stores fits one engine value (%d bytes): %w",
			opts.MaxPacketSize, MaxPacketSizeLimit, engine.MaxValueSize, engine.ErrInvalidOption)
	}
	opts.norm()
	var err error
	if opts.TablesPrefix, err = normTablesPrefix(opts.TablesPrefix); err != nil {
		return nil, err
	}
	for _, r := range opts.Retention {
		if err := r.Check(); err != nil {
			return nil, err
		}
	}
	if err := retention.Save(context.Background(), db, opts.Retention); err != nil {
		return nil, err
	}
	if opts.NodeID != "" {
		if err := nodeIDFree(context.Background(), db, opts.NodeID); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		db: db, parts: parts, opts: opts, log: opts.Logger.With("component", "mqtt"), group: maxGroup,
		conns: map[string]*conn{}, wills: map[string]*pendingWill{},
		gate: admit.New(opts.MaxConnections, opts.MaxConnRate), runners: workers.NewPool(ctx),
		tables: tabletopic.Space{Prefix: opts.TablesPrefix},
		ctx:    ctx, cancel: cancel, rules: retention.NewSet(tableMsgs, opts.Retention),
	}
	b.guard = access.New(opts.Authenticator, opts.Authorizer, opts.AuthConcurrency, &b.metrics)
	// One limiter per pair of a partition's sessions and a partition's
	// log: a session's limits hold in each partition of the log.
	for s := range parts.Count() {
		for p := range parts.Count() {
			b.queues = append(b.queues, &queuelimit.Limiter{DB: parts.DB(s), MessageLog: parts.DB(p), Part: p,
				Log: b.log, Counters: &b.metrics, MaxMessages: opts.MaxQueuedMessages, MaxBytes: opts.MaxQueuedBytes,
				Online: b.onlineCheckpoint, BeginCut: b.beginQueueCut, BeforeCut: func(client string) { b.beforeSubmit(KindQueueCut, client) }})
		}
	}
	for i := range parts.Count() {
		b.stores = append(b.stores, &session.Store{DB: parts.DB(i), Log: b.log, MaxDeletes: b.maxStateDeletes, Online: b.onlineCheckpoint, Gone: b.offline.remove})
	}
	if err := b.startRouter(ctx); err != nil {
		cancel()
		return nil, err
	}
	if engine.PrefersSeparateCommits(db.Engine()) {
		b.group = 1
	}
	b.deliv = &delivery.Env{
		Parts: b.parts, Router: b.router, Runners: b.runners, Counters: &b.metrics, Tables: b.tables, Group: b.group,
		CheckpointEvery: opts.CheckpointEvery, RetentionEvery: opts.RetentionEvery, MaxInflightBytes: opts.MaxInflightBytes,
		MaxLazy: b.maxLazy(), MaxStateDeletes: b.maxStateDeletes(), IndexEvery: b.indexEvery(),
		OnStore: b.onStore, PostStore: b.postStore, BeforeCheckpoint: func(client string) { b.beforeSubmit(KindCheckpoint, client) },
		Joined: b.sharesOnline,
	}
	for _, st := range b.stores {
		if err := st.IndexCheckpoints(ctx); err != nil {
			cancel()
			b.router.Close()
			return nil, err
		}
	}
	if err := b.loadOfflineShares(ctx); err != nil {
		cancel()
		b.router.Close()
		return nil, fmt.Errorf("mqtt: read the shared subscriptions' members: %w", err)
	}
	if err := b.countRetained(ctx); err != nil {
		cancel()
		b.router.Close()
		return nil, err
	}
	b.recoverWills()
	if b.poller, err = netio.NewPoller(); err != nil {
		b.log.Debug("no poller; idle connections wait on goroutines", "err", err)
		b.poller = nil
	}
	b.store = workers.StartCalls(b.ctx, storeGoroutines, &b.wg)
	b.wg.Add(2)
	go b.expireSessions()
	go b.retentionLoop()
	if opts.NodeID != "" {
		b.wg.Add(2)
		go b.followTakeovers()
		go b.beat()
	}
	if opts.MaxMemory > 0 {
		b.wg.Add(1)
		go b.sampleMemory()
	}
	return b, nil
}

// Serve accepts connections on ln until the broker closes or ln is
// closed (mqtt.Broker.Serve).
func (b *Broker) Serve(ln net.Listener) error {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		// Closed here as Close would have: a listener handed over as the
		// broker closes must not keep its port.
		_ = ln.Close()
		return net.ErrClosed
	}
	b.listeners = append(b.listeners, ln)
	b.mu.Unlock()
	return b.acceptLoop(ln)
}

// Close stops the broker, not its table.DB (mqtt.Broker.Close).
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return nil
	}
	b.closing = true
	for _, ln := range b.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(b.conns))
	for _, c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	b.gate.Close()
	for _, c := range conns {
		c.shutdown()
	}
	b.settleRouter(2 * time.Second)
	b.cancel()
	// A connection registered after the list above was taken may have
	// parked before the broker's context ended: its end is reported to
	// it here (see conn.grow); one that parks after it sees the context
	// ended and does not park.
	b.mu.Lock()
	for _, c := range b.conns {
		if c.pk != nil {
			c.pk.Ready()
		}
	}
	b.mu.Unlock()
	b.wg.Wait()
	if b.poller != nil {
		_ = b.poller.Close()
	}
	return b.router.Close()
}

// assignClientID returns a fresh client id for a client that sent none.
func assignClientID() string {
	var r [12]byte
	_, _ = rand.Read(r[:])
	return "tm-" + hex.EncodeToString(r[:])
}

// slotSep separates a client id from the rest of a per-client record id,
// in the broker's tables as in the session tables.
const slotSep = session.Sep

func slotID(client string, pi uint16) string { return session.SlotID(client, pi) }
