//go:build !nojetstream

package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
	"github.com/tidemark-io/tidemark/engine/internal/group"
	"github.com/tidemark-io/tidemark/engine/internal/space"
)

func init() {
	driver.Register(Name, driver.Driver{
		Open: open,
		Params: append([]driver.Param{
			{Name: "url", Default: "", Doc: "NATS server URL(s), comma-separated; empty starts an embedded server on 127.0.0.1 storing under Options.Dir"},
			{Name: "stream", Default: "tidemark", Doc: "stream name and subject prefix; letters, digits, '-' and '_'"},
			{Name: "replicas", Default: "1", Doc: "stream replicas (use 3 on a cluster)"},
			{Name: "leader", Default: "", Doc: "server name to lead the stream, moved there at open and back after an election moved it away (url and replicas of 2 or more); empty leaves the leader where it is"},
			{Name: "leader_check", Default: "30s", Doc: "with leader: how often the engine checks that the stream's leader is that server (at least 100ms)"},
			{Name: "max_batch", Default: "16384 embedded, 1000 with url", Doc: "most messages per atomic batch (commit=batch); lowered when the server reports a smaller limit"},
			{Name: "tombstone_ttl", Default: "60s", Doc: "how long a deleted key's delete marker stays in the stream (at least 1s)"},
			{Name: "start_timeout", Default: "2m", Doc: "how long opening waits for the NATS servers, a JetStream leader and the stream when the caller sets no deadline"},
			{Name: "stall_timeout", Default: "5s", Doc: "how long the index consumer may stand still while the stream holds messages it has not brought before it is recreated"},
			{Name: "index_cache_mb", Default: strconv.Itoa(defaultIndexCacheMB), Doc: "block cache in MiB of the local index the engine reads from (beside its memtables, 16 MiB each, at most a few)"},
			{Name: "reserve_mb", Default: strconv.Itoa(defaultReserveMB), Doc: "with the embedded server: free space in MiB commits leave on the data directory's file system (0 to 1048576); commits that would use it are refused with driver.ErrWriteFailed"},
			{Name: "commit", Default: "wal embedded, batch with url", Doc: "wal: this engine is the stream's only writer, one message per group of commits (embedded server only); batch: any number of nodes share the stream, atomic batch publish"},
		}, secureParams...),
		Doc: "NATS JetStream (embedded server or a cluster); one log key per record; group commit as one transaction message (single writer) or one atomic batch (shared stream)",
	})
}

// Header names the engine stores on its messages.
const (
	hdrOp  = "Tidemark-Op"  // "del" on a delete marker
	hdrEnd = "Tidemark-End" // on the last message of each group: "1" on a batch, the commit id on a plain publish
)

// Commit protocols (parameter "commit"), recorded in the stream's
// metadata under metaCommit so every opener agrees.
const (
	commitWAL   = "wal"
	commitBatch = "batch"
	metaCommit  = "tidemark_commit"
)

// opTimeout bounds one request to the server.
const opTimeout = 30 * time.Second

var streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// db is the engine.
type db struct {
	opts driver.Options
	log  *slog.Logger
	srv  *server.Server // nil with an external server
	// space refuses commits that would leave less than reserve() free on
	// the embedded server's disk (see space.go); nil with an external
	// server.
	space        *space.Guard
	reserveBytes int64
	// broken is the write failure the embedded server's store reported,
	// until restartStore brought the store back.
	broken atomic.Pointer[error]
	// down is closed when broken is set; restartStore puts a new one.
	down atomic.Pointer[chan struct{}]
	// dirLock holds Options.Dir for the embedded server.
	dirLock *dirlock.Lock
	nc      *nats.Conn
	js      jetstream.JetStream
	st      jetstream.Stream
	name    string

	dataPrefix, logSubj, floorSubj, checkSubj string

	// Single-writer layout (commit=wal): transaction messages under
	// txPrefix, on txLogSubj when they carry log entries and txStateSubj
	// when not, the materialized mark on markSubj, and fences for a
	// lost answer on fenceSubj.
	wal                                                   bool
	txPrefix, txLogSubj, txStateSubj, markSubj, fenceSubj string
	mat                                                   *materializer
	acks                                                  *acker
	txBuf                                                 []byte // committer only
	logTotal                                              uint64 // committer only: log entries the stream received
	recent                                                recentLog

	// leader is the server the stream's leader is moved to at open
	// (parameter leader; see preferLeader); empty leaves it where it is.
	leader string
	// leaderCheck is how often keepLeader looks (parameter leader_check);
	// closing leaderStop ends it, and leaderDone is closed when it ended
	// (at once without a leader).
	leaderCheck            time.Duration
	leaderStop, leaderDone chan struct{}

	// startTimeout bounds opening when the caller's context has no
	// deadline (parameter start_timeout).
	startTimeout time.Duration
	// stallAfter is how long the index consumer may stand still with
	// messages to bring before it is recreated (parameter stall_timeout).
	stallAfter time.Duration

	maxBatch int // messages per atomic batch; committer only
	// batchLimit is maxBatch for other goroutines (MaxCommitEntries).
	batchLimit atomic.Int64
	maxMessage int // largest message payload the connection allows

	// Submission queue, drained in order by the committer.
	queue  *group.Queue[*pending]
	mu     sync.Mutex // guards closed
	closed bool
	// gate picks the deferred commits that wait for company
	// (single-writer protocol only).
	gate *deferral.Gate

	idx      *store // the index: every live key's record, on local disk
	view     view   // what the index applied
	feed     *feed  // the index consumer; nil once a single-writer stream loaded
	notifier driver.Notifier

	committerDone chan struct{}

	inflightMu     sync.Mutex
	inflightCancel context.CancelFunc // the publish awaiting an answer

	engineID  string        // tells this engine's commit ids from other engines'
	commitSeq atomic.Uint64 // numbers the commit ids of plain publishes

	pages chan struct{} // a slot per page read in flight (see getPage)

	// lost is a transaction of unknown outcome (committer only); lostNow
	// says there is one, for Health.
	lost    *lostTx
	lostNow atomic.Bool
}

// cancelInflight gives up on the acknowledgement of the batch in flight;
// the committer then asks the stream whether the batch landed.
func (d *db) cancelInflight() {
	d.inflightMu.Lock()
	if d.inflightCancel != nil {
		d.inflightCancel()
	}
	d.inflightMu.Unlock()
}

func open(ctx context.Context, opts driver.Options) (driver.Engine, error) {
	url := strings.TrimSpace(opts.Params["url"])
	name := opts.Params["stream"]
	if name == "" {
		name = "tidemark"
	}
	if !streamName.MatchString(name) {
		return nil, fmt.Errorf("%w: jetstream parameter stream=%q: use 1-64 letters, digits, '-' or '_'", driver.ErrInvalidOption, name)
	}
	replicas, err := driver.IntParam(opts, "jetstream", "replicas", 1, 1, 5)
	if err != nil {
		return nil, err
	}
	if replicas > 5 {
		return nil, fmt.Errorf("%w: jetstream parameter replicas=%d: at most 5", driver.ErrInvalidOption, replicas)
	}
	defBatch := embeddedMaxBatch
	if url != "" {
		defBatch = externalMaxBatch
	}
	maxBatch, err := driver.IntParam(opts, "jetstream", "max_batch", defBatch, 1, 1<<30)
	if err != nil {
		return nil, err
	}
	mode := opts.Params["commit"]
	switch {
	case mode == "" && url == "":
		mode = commitWAL
	case mode == "":
		mode = commitBatch
	case mode != commitWAL && mode != commitBatch:
		return nil, fmt.Errorf("%w: jetstream parameter commit=%q: use %q (one writer, embedded server) or %q (shared stream)", driver.ErrInvalidOption, mode, commitWAL, commitBatch)
	case mode == commitWAL && url != "":
		return nil, fmt.Errorf("%w: jetstream parameter commit=wal needs the embedded server (it must be the stream's only writer); drop url, or use commit=batch to share a stream on %s", driver.ErrInvalidOption, url)
	}
	tombTTL := time.Minute
	if v := opts.Params["tombstone_ttl"]; v != "" {
		if tombTTL, err = time.ParseDuration(v); err != nil || tombTTL < time.Second {
			return nil, fmt.Errorf("%w: jetstream parameter tombstone_ttl=%q: use a duration of at least 1s, such as 60s", driver.ErrInvalidOption, v)
		}
	}
	startTimeout := defaultStartTimeout
	if v := opts.Params["start_timeout"]; v != "" {
		if startTimeout, err = time.ParseDuration(v); err != nil || startTimeout <= 0 {
			return nil, fmt.Errorf("%w: jetstream parameter start_timeout=%q: use a positive duration, such as 2m", driver.ErrInvalidOption, v)
		}
	}
	stall := defaultStallAfter
	if v := opts.Params["stall_timeout"]; v != "" {
		if stall, err = time.ParseDuration(v); err != nil || stall < time.Second {
			return nil, fmt.Errorf("%w: jetstream parameter stall_timeout=%q: use a duration of at least 1s, such as 15s", driver.ErrInvalidOption, v)
		}
	}
	reserveMB, err := driver.IntParam(opts, "jetstream", "reserve_mb", defaultReserveMB, 0, 1<<20)
	if err != nil {
		return nil, err
	}
	indexCacheMB, err := driver.IntParam(opts, "jetstream", "index_cache_mb", defaultIndexCacheMB, 1, 1<<20)
	if err != nil {
		return nil, err
	}
	leader := strings.TrimSpace(opts.Params["leader"])
	leaderCheck := defaultLeaderCheck
	if v := opts.Params["leader_check"]; v != "" {
		if leaderCheck, err = time.ParseDuration(v); err != nil || leaderCheck < 100*time.Millisecond {
			return nil, fmt.Errorf("%w: jetstream parameter leader_check=%q: use a duration of at least 100ms, such as 30s", driver.ErrInvalidOption, v)
		}
	}
	if leader != "" && (url == "" || replicas < 2) {
		return nil, fmt.Errorf("%w: jetstream parameter leader=%q: a leader is chosen among the servers of a replicated stream; give url and replicas=2 or more", driver.ErrInvalidOption, leader)
	}
	secure, err := secureOptions(opts.Params, url)
	if err != nil {
		return nil, err
	}
	if url == "" && opts.Dir == "" {
		return nil, fmt.Errorf("%w: jetstream needs a data directory (Options.Dir) for its embedded server", driver.ErrInvalidOption)
	}
	d := &db{
		opts:          opts,
		log:           opts.Log().With("engine", Name),
		name:          name,
		dataPrefix:    name + ".d.",
		logSubj:       name + ".l",
		floorSubj:     name + ".f",
		checkSubj:     name + ".c",
		wal:           mode == commitWAL,
		txPrefix:      name + ".x.",
		txLogSubj:     name + ".x.l",
		txStateSubj:   name + ".x.t",
		markSubj:      name + ".w",
		fenceSubj:     name + ".n",
		maxBatch:      maxBatch,
		startTimeout:  startTimeout,
		stallAfter:    stall,
		gate:          deferral.NewGate(opts.DeferralAnyMode()),
		committerDone: make(chan struct{}),
		engineID:      newEngineID(),
		leader:        leader,
		leaderCheck:   leaderCheck,
		leaderStop:    make(chan struct{}),
		leaderDone:    make(chan struct{}),
		reserveBytes:  int64(reserveMB) << 20,
		pages:         make(chan struct{}, pageReads),
	}
	d.queue = d.newQueue()
	d.batchLimit.Store(int64(maxBatch))
	down := make(chan struct{})
	d.down.Store(&down)
	if url == "" {
		if d.dirLock, err = dirlock.Take("jetstream", opts.Dir); err != nil {
			return nil, err
		}
	} else if opts.Dir != "" {
		if err := dirlock.Check("jetstream", opts.Dir); err != nil {
			return nil, err
		}
	}
	if d.idx, err = openStore(opts.Dir, int64(indexCacheMB)<<20, d.log); err != nil {
		d.dirLock.Release()
		return nil, err
	}
	d.view.init(d.idx, d.log)
	d.view.tombTTL = tombTTL
	if url == "" {
		d.space = space.NewGuard("jetstream", opts.Dir, d.reserve, d.log)
		d.space.OnSpace(d.restartStore)
		if d.srv, err = startEmbedded(opts, d.log, !d.wal, d.serverWriteFailed); err != nil {
			d.space.Close()
			d.idx.close()
			d.dirLock.Release()
			return nil, err
		}
		url = d.srv.ClientURL()
	}
	if err := d.connect(ctx, url, replicas, secure...); err != nil {
		d.view.close()
		d.shutdownTransport()
		return nil, err
	}
	if d.leader != "" {
		go d.keepLeader()
	} else {
		close(d.leaderDone)
	}
	if d.wal {
		applied, _ := d.view.state()
		d.recent.reset(applied + 1)
		go d.committerWAL()
		go d.mat.run()
	} else {
		go d.committer()
	}
	return d, nil
}

// connect dials the server, creates or updates the stream and starts the
// index consumer, returning once the index caught up with the stream.
func (d *db) connect(ctx context.Context, url string, replicas int, secure ...nats.Option) error {
	copts := []nats.Option{
		nats.Name("tidemark-" + d.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		// A reply to a request sent before a disconnect is never
		// delivered; stop waiting for the batch in flight at once.
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			d.cancelInflight()
			if !d.isClosed() {
				d.log.Warn("lost the connection to the NATS server; reconnecting", "stream", d.name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			d.log.Warn("reconnected to the NATS server", "stream", d.name, "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if !d.isClosed() {
				d.log.Error("the connection to the NATS server closed for good; commits and reads fail", "stream", d.name, "err", nc.LastError())
			}
		}),
		// Asynchronous errors (a subscription that fell behind, a
		// protocol error) go to the log, not to stderr.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			d.log.Warn("NATS connection error", "stream", d.name, "subject", subject, "err", err)
		}),
		// Each page of a log scan (a batch direct get) is a synchronous
		// subscription of its own; the default queue (64k messages) made
		// every one allocate half a megabyte for at most scanPage+1.
		nats.SyncQueueLen(4 * scanPage),
	}
	if d.wal {
		// The embedded server has no listener: nobody else can write.
		copts = append(copts, nats.InProcessServer(d.srv))
	}
	copts = append(copts, secure...)
	// Nodes and servers may start in any order: opening waits for what
	// is not there yet (a server to connect to, a meta leader, enough
	// servers for the replicas), each request with a deadline of its own,
	// and says what it waits for, up to the caller's deadline or
	// start_timeout.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.startTimeout)
		defer cancel()
	}
	var nc *nats.Conn
	err := d.request(ctx, "connect to "+redactURLs(url), attemptTimeout, func(context.Context) error {
		var err error
		nc, err = nats.Connect(url, copts...)
		return err
	})
	if err != nil {
		return err
	}
	d.nc = nc
	d.log.Info("connected to NATS", "server", nc.ConnectedUrlRedacted(), "server_name", nc.ConnectedServerName(), "cluster", nc.ConnectedClusterName(), "stream", d.name)
	d.maxMessage = int(nc.MaxPayload())
	if d.js, err = jetstream.New(nc, jetstream.WithDefaultTimeout(opTimeout)); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// A new stream leader never answers a batch sent to the old one: stop
	// waiting for it and ask the stream whether it landed.
	if _, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."+d.name, func(*nats.Msg) {
		d.cancelInflight()
	}); err != nil {
		return fmt.Errorf("jetstream: subscribe to leader elections: %w", err)
	}
	mode := commitBatch
	if d.wal {
		mode = commitWAL
	}
	var existing jetstream.Stream
	err = d.request(ctx, "look up stream "+d.name, attemptTimeout, func(ctx context.Context) error {
		st, err := d.js.Stream(ctx, d.name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		existing = st
		return err
	})
	if err != nil {
		return err
	}
	if existing != nil {
		has := existing.CachedInfo().Config.Metadata[metaCommit]
		if has == "" {
			has = commitBatch
		}
		if has != mode {
			return fmt.Errorf("%w: stream %s was written with commit=%s; open it with commit=%s", driver.ErrInvalidOption, d.name, has, has)
		}
	}
	cfg := jetstream.StreamConfig{
		Name:               d.name,
		Description:        "Tidemark engine: data, change log and truncation floor",
		Subjects:           []string{d.name + ".>"},
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		Retention:          jetstream.LimitsPolicy,
		Discard:            jetstream.DiscardOld,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		// A key's new value replaces its old one (Nats-Rollup: sub);
		// delete markers of the single-writer layout expire.
		AllowRollup: true,
		AllowMsgTTL: true,
		Metadata:    map[string]string{metaCommit: mode},
	}
	err = d.request(ctx, fmt.Sprintf("create or update stream %s (%d replicas)", d.name, replicas), createTimeout, func(ctx context.Context) error {
		st, err := d.js.CreateOrUpdateStream(ctx, cfg)
		d.st = st
		return err
	})
	if err != nil {
		return err
	}
	if d.leader != "" {
		// A server asked for that is down or behind does not keep the
		// node from starting: the stream keeps its leader, and
		// keepLeader moves it once the server is current again. Only a
		// request that cannot be met (no cluster, no such server) fails.
		if err := d.preferLeader(ctx, d.leader); errors.Is(err, driver.ErrInvalidOption) {
			return err
		} else if err != nil {
			d.log.Warn("the stream's leader stays where it is for now; it moves to the server asked for once that server is a current replica",
				"stream", d.name, "asked", d.leader, "err", err)
		}
	}
	cctx := ctx
	if d.wal {
		if d.acks, err = newAcker(nc); err != nil {
			return err
		}
		return d.loadWAL(cctx)
	}
	return d.startConsumer(cctx)
}

func (d *db) Name() string                    { return Name }
func (d *db) Granularity() driver.Granularity { return driver.PerRecord }

// PrefersSeparateCommits is true on a shared stream (commit=batch): a
// commit of several messages is an atomic batch, which the server stages
// in a file store of its own on R1 streams (milliseconds per batch), while
// single-message commits without checks go as plain publishes in flight
// together. With one writer a group of commits is one message, so
// gathering pays.
func (d *db) PrefersSeparateCommits() bool { return !d.wal }

// MaxCommitEntries is the atomic batch limit on a shared stream
// (commit=batch): the max_batch parameter, lowered to what the server
// reports when it refuses a batch as too large. With one writer a commit
// is one message, limited by bytes only.
func (d *db) MaxCommitEntries() int {
	if d.wal {
		return driver.MaxBatchEntries
	}
	return int(d.batchLimit.Load())
}
func (d *db) Watch(ctx context.Context) <-chan struct{} {
	return d.notifier.Subscribe(ctx)
}

// Close completes every submitted commit, then stops the consumer, the
// connection and the embedded server, and removes the index.
func (d *db) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("jetstream: close: %w", driver.ErrClosed)
	}
	d.closed = true
	d.mu.Unlock()
	close(d.leaderStop)
	<-d.leaderDone
	d.queue.Close()
	<-d.committerDone
	if d.mat != nil {
		close(d.mat.stop)
		<-d.mat.done
	}
	d.view.close()
	d.notifier.Close()
	d.shutdownTransport()
	return nil
}

func (d *db) shutdownTransport() {
	if d.feed != nil {
		d.feed.close(context.Background(), false)
	}
	if d.nc != nil {
		d.nc.Close()
	}
	if d.space != nil {
		d.space.Close()
	}
	stopEmbedded(d.srv)
	// The view closed first: the consumer no longer writes to the index.
	d.idx.close()
	d.dirLock.Release()
}

func (d *db) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// redactURLs returns the comma-separated NATS URLs without their user
// information, for logs.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := neturl.Parse(p); err == nil && u.User != nil {
			u.User = nil
			p = u.String()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// newEngineID returns a random id that tells this engine's commit ids
// from those of every other engine on the stream.
func newEngineID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tombTTLHeader is the Nats-TTL value of a delete marker.
func (d *db) tombTTLHeader() string {
	return strconv.Itoa(int(d.view.tombTTL/time.Second)) + "s"
}

func (d *db) dataSubject(key []byte) string {
	return d.dataPrefix + hex.EncodeToString(key)
}
