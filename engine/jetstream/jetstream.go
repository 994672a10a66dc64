// Package jetstream is Tidemark's scale-out engine, on NATS JetStream
// (github.com/nats-io/nats.go and its jetstream package). Importing it
// registers the engine as "jetstream". Many Tidemark nodes can share one
// stream on one NATS cluster; each sees the others' commits.
//
// # Server
//
// With no "url" parameter the engine starts an embedded nats-server
// (github.com/nats-io/nats-server/v2) with JetStream, storing under
// Options.Dir/nats (the directory locked against a second engine), and
// shuts it down on Close. With commit=wal it has no listener; with
// commit=batch it listens on 127.0.0.1, random port (see ClientURL). With
// "url" the engine connects to that server or cluster (comma-separated
// URLs) and leaves it running.
//
// Parameters (Options.Params):
//
//   - url: NATS server URL(s); empty (the default) starts the embedded server.
//   - stream: the stream name, also the subject prefix, so several Tidemark
//     deployments can share one cluster; letters, digits, '-' and '_';
//     default "tidemark".
//   - replicas: stream replicas, 1 by default; use 3 on a cluster.
//   - commit: "wal" (the default with the embedded server) or "batch"
//     (the default, and the only choice, with "url"); see below. A stream
//     records the protocol it was created with and refuses the other.
//   - tombstone_ttl: how long a deleted key's delete marker stays in the
//     stream and in each node's index; 60s by default, at least 1s.
//   - max_batch: the most messages one atomic batch may carry; by default
//     the limit the engine configures on the embedded server (16384), or
//     the nats-server default (1000) with "url". A server that reports a
//     lower limit lowers it at run time.
//
// # Single writer (commit=wal)
//
// With the embedded server and commit=wal the engine is the stream's only
// writer: the server has no listener, the engine connects in process. A
// group of commits (everything queued when the committer takes the next,
// up to 8 MiB) is one message on "<stream>.x.l" (when it carries log
// entries) or "<stream>.x.t" (when not) holding all its writes and log
// entries; one message is atomic by itself, so the group costs one plain
// publish. Checks are decided on the index, which is exact: nobody else
// writes and one group is in flight at a time. A log key is the group
// message's stream sequence shifted left 20 bits plus the entry's position
// in it, so keys grow within a commit and across commits.
//
// A materializer copies each changed key's newest value to "<stream>.d.<hex>"
// (replacing the one before it: Nats-Rollup) or, for a deleted key that has
// a value there, a delete marker that expires (tombstone_ttl); it runs every
// second and writes the keys changed in the second before last, so a key
// written and deleted within a second (a broker's staged messages,
// delivery records, completion marks) is never copied. It then records up
// to which group message every change is copied ("<stream>.w", the mark)
// and purges the group messages without log entries below the mark and
// those with log entries below both the mark and the truncation floor.
// Opening reads the last message of every subject, then replays every
// group message above the mark in stream order; a crash anywhere loses
// nothing acknowledged. The log entries of the last group messages
// (32Ki entries or 8 MiB) stay in memory, so a live reader is answered
// without a request to the server; older ones are read from the stream.
//
// # Layout (commit=batch)
//
// Everything lives in one stream with subjects "<stream>.>": a put or
// delete of key K is a message on "<stream>.d.<hex(K)>" (lowercase hex
// keeps byte order), log entries are messages on "<stream>.l", the
// truncation floor is the last message on "<stream>.f", and "<stream>.c"
// carries expectations on keys a commit checks but does not write.
//
// # Commits (commit=batch)
//
// Log keys are per record: each entry's key is its stream sequence, so keys
// never go backwards, not across restarts nor after the whole log was
// truncated (stream sequences are never reused, and the floor message stays
// above every purged entry). Submitted commits queue in order; one
// committer gathers every queued commit (up to max_batch messages) into one
// atomic batch publish (the stream allows atomic publish; the batch
// applies entirely or not at all) and completes their handles, in
// submission order, once the batch is acknowledged and applied to the
// local index. Gathering is what makes it fast: an atomic batch costs about
// three fsyncs whatever its size (on an R1 file stream the server stages
// each batch in a new file store). A group that comes down to a single
// message goes as a plain publish instead, which is atomic by itself,
// checks the same expected sequence and costs no staging. Within a group
// only the last write of a key is sent. After a group of several commits
// the committer waits a little (a quarter of the time the group took, at
// most 3ms) for as many commits to queue again before it sends the next:
// the callers of a group tend to follow up at once (a broker releasing
// what it staged, clients sending their next message), and one batch
// costs the server far less than two. The committer applies its own
// acknowledged batch to the index itself when the index stands right
// before it, instead of waiting for the consumer to bring it back. A group
// of commits that are each one message without checks (appends or puts
// from independent writers) goes as that many plain publishes, all sent
// before the first answer is awaited: none depends on another, the stream
// applies them in the order sent, and one the server rejects fails alone. Expect and ExpectAbsent are checked against the index and
// sent as the key's expected last subject sequence, so the server rejects
// the batch if another node changed the key in the meantime; the engine
// then catches up with the stream, fails the commits whose checks no
// longer hold with engine.ErrConflict and publishes the rest again.
//
// # Durability
//
// Handles complete after the server acknowledged the batch (with
// commit=wal: the group message) and the index applied it. Under
// commit=wal, in every sync mode, a queue of only deferred commits
// (Batch.Defer) waits up to the defer window (Options.DeferralAnyMode) for
// a commit that is not deferred, so one message, one round trip through
// the server and, under SyncAlways, one server sync carry them all: each
// message costs the server's reader, the stream's goroutine and its
// writer, sync or not (QoS 2 at window 1 with sync=none: 2.9 messages per
// exchange without it, 2 with it, ~10% more exchanges/s). On the
// embedded server, SyncAlways runs the server with sync always: each batch
// is fsynced before its acknowledgement, so an acknowledged commit survives
// an operating-system crash. SyncInterval sets the server's sync interval
// to Options.Interval(): an operating-system crash can lose that much
// acknowledged work, a process crash nothing. SyncNone keeps the server
// default (a sync every two minutes): an operating-system crash can lose
// minutes of acknowledged commits, a process crash nothing. With "url" the
// sync mode is ignored: durability is the cluster's setting (sync_interval
// on each server). On an R3 stream an acknowledgement means a majority of
// the replicas stored the batch, so a commit survives the loss of any one
// server, and an operating-system crash of one server even without sync
// always.
//
// # Reads
//
// JetStream has no ordered key index, so each engine keeps one in memory:
// an ordered consumer over the whole stream (the last message per subject
// on open, then every new message) applies each batch, whole, to an
// immutable ordered map. A Snapshot is a root of that map: it sees a prefix
// of the stream, never part of a batch, including every commit this engine
// completed before it was taken and the other nodes' commits this engine
// had received by then. A check decided on this index against a value
// another node committed but this node has not received yet fails with
// engine.ErrConflict (a retry after re-reading succeeds); it never lets a
// stale check pass, since the server compares sequences. ScanLog reads the
// log subject straight from the stream with batched direct gets, but only
// up to the last sequence the index applied, so a reader that saw log key
// K finds every commit up to K in a snapshot taken after; on a
// replicated stream a follower may answer, so a scan keeps reading until
// it reached the newest entry the index had seen when the scan began.
// Watch fires once the index has applied new log entries: for this
// engine's commits after their handles completed, for other nodes' commits
// as they arrive. With commit=wal the consumer only loads the index at
// open; after that the committer keeps it, and ScanLog decodes the log
// entries of the group messages on "<stream>.x.l" up to the last group
// the index applied.
//
// # Limits
//
// The index holds every live key and value (and a sequence for each
// deleted key, for tombstone_ttl) in memory. A key's subject keeps only
// its newest write (a rollup), and a delete marker expires after
// tombstone_ttl, in the stream and in every node's index; a check on a key
// whose marker one side forgot first fails on the server, and the engine
// then reads the key's subject and decides again. Truncate purges log
// entries and check carriers below the floor. One message carries at most the server's
// max_payload (48 MiB on the embedded server, so that one commit of
// engine.MaxBatchBytes is one message; values near engine.MaxValueSize
// need 8 MiB on an external server too). A commit whose
// acknowledgement is lost (a timeout, a lost connection, a leader change)
// is looked up in the stream by its id (the batch id, or on a plain
// publish the id in its Tidemark-End header) after catching up: found, it
// completes normally; not found, its handle fails with the transport
// error. Such a batch could still land afterwards only if a server held
// it unapplied past the catch-up, so a caller must treat that failure as
// "outcome unknown", as with any lost acknowledgement. With commit=wal the
// engine first gets a fence message acknowledged on the same connection
// ("<stream>.n"): the server handles one connection's messages in order,
// so the lookup after it is final.
package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/internal/deferral"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
)

// Name is the registered engine name.
const Name = "jetstream"

func init() {
	engine.Register(Name, engine.Driver{
		Open:        open,
		Granularity: engine.PerRecord,
		Params: append([]engine.Param{
			{Name: "url", Default: "", Doc: "NATS server URL(s), comma-separated; empty starts an embedded server on 127.0.0.1 storing under Options.Dir"},
			{Name: "stream", Default: "tidemark", Doc: "stream name and subject prefix; letters, digits, '-' and '_'"},
			{Name: "replicas", Default: "1", Doc: "stream replicas (use 3 on a cluster)"},
			{Name: "max_batch", Default: "16384 embedded, 1000 with url", Doc: "most messages per atomic batch (commit=batch); lowered when the server reports a smaller limit"},
			{Name: "tombstone_ttl", Default: "60s", Doc: "how long a deleted key's delete marker stays in the stream (at least 1s)"},
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
	opts engine.Options
	log  *slog.Logger
	srv  *server.Server // nil with an external server
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

	maxBatch   int // messages per atomic batch; committer only
	maxMessage int // largest message payload the connection allows

	// Submission queue, drained in order by the committer.
	mu     sync.Mutex
	closed bool
	queue  []*pending
	wake   chan struct{}
	// gate picks the deferred commits that wait for company
	// (single-writer protocol only).
	gate *deferral.Gate

	view      view // the index and what the consumer applied
	consumer  jetstream.ConsumeContext
	indexCons jetstream.Consumer
	notifier  engine.Notifier

	committerDone chan struct{}

	inflightMu     sync.Mutex
	inflightCancel context.CancelFunc // the publish awaiting an answer

	engineID  string        // tells this engine's commit ids from other engines'
	commitSeq atomic.Uint64 // numbers the commit ids of plain publishes
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

func open(ctx context.Context, opts engine.Options) (engine.Engine, error) {
	url := strings.TrimSpace(opts.Params["url"])
	name := opts.Params["stream"]
	if name == "" {
		name = "tidemark"
	}
	if !streamName.MatchString(name) {
		return nil, fmt.Errorf("%w: jetstream parameter stream=%q: use 1-64 letters, digits, '-' or '_'", engine.ErrInvalidOption, name)
	}
	replicas, err := engine.IntParam(opts, "jetstream", "replicas", 1, 1, 5)
	if err != nil {
		return nil, err
	}
	if replicas > 5 {
		return nil, fmt.Errorf("%w: jetstream parameter replicas=%d: at most 5", engine.ErrInvalidOption, replicas)
	}
	defBatch := embeddedMaxBatch
	if url != "" {
		defBatch = externalMaxBatch
	}
	maxBatch, err := engine.IntParam(opts, "jetstream", "max_batch", defBatch, 1, 1<<30)
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
		return nil, fmt.Errorf("%w: jetstream parameter commit=%q: use %q (one writer, embedded server) or %q (shared stream)", engine.ErrInvalidOption, mode, commitWAL, commitBatch)
	case mode == commitWAL && url != "":
		return nil, fmt.Errorf("%w: jetstream parameter commit=wal needs the embedded server (it must be the stream's only writer); drop url, or use commit=batch to share a stream on %s", engine.ErrInvalidOption, url)
	}
	tombTTL := time.Minute
	if v := opts.Params["tombstone_ttl"]; v != "" {
		if tombTTL, err = time.ParseDuration(v); err != nil || tombTTL < time.Second {
			return nil, fmt.Errorf("%w: jetstream parameter tombstone_ttl=%q: use a duration of at least 1s, such as 60s", engine.ErrInvalidOption, v)
		}
	}
	secure, err := secureOptions(opts.Params, url)
	if err != nil {
		return nil, err
	}
	if url == "" && opts.Dir == "" {
		return nil, fmt.Errorf("%w: jetstream needs a data directory (Options.Dir) for its embedded server", engine.ErrInvalidOption)
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
		wake:          make(chan struct{}, 1),
		gate:          deferral.NewGate(opts.DeferralAnyMode()),
		committerDone: make(chan struct{}),
		engineID:      newEngineID(),
	}
	d.view.init()
	d.view.tombTTL = tombTTL
	if url == "" {
		if d.dirLock, err = dirlock.Take("jetstream", opts.Dir); err != nil {
			return nil, err
		}
		if d.srv, err = startEmbedded(opts, d.log, !d.wal); err != nil {
			d.dirLock.Release()
			return nil, err
		}
		url = d.srv.ClientURL()
	}
	if err := d.connect(ctx, url, replicas, secure...); err != nil {
		d.shutdownTransport()
		return nil, err
	}
	if d.wal {
		_, applied, _ := d.view.state()
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
		nats.DisconnectErrHandler(func(*nats.Conn, error) { d.cancelInflight() }),
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
	nc, err := nats.Connect(url, copts...)
	if err != nil {
		return fmt.Errorf("jetstream: connect %s: %w", url, err)
	}
	d.nc = nc
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
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	mode := commitBatch
	if d.wal {
		mode = commitWAL
	}
	if st, err := d.js.Stream(cctx, d.name); err == nil {
		has := st.CachedInfo().Config.Metadata[metaCommit]
		if has == "" {
			has = commitBatch
		}
		if has != mode {
			return fmt.Errorf("%w: stream %s was written with commit=%s; open it with commit=%s", engine.ErrInvalidOption, d.name, has, has)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("jetstream: look up stream %s: %w", d.name, err)
	}
	d.st, err = d.js.CreateOrUpdateStream(cctx, jetstream.StreamConfig{
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
	})
	if err != nil {
		return fmt.Errorf("jetstream: create stream %s: %w", d.name, err)
	}
	if d.wal {
		if d.acks, err = newAcker(nc); err != nil {
			return err
		}
		return d.loadWAL(cctx)
	}
	return d.startConsumer(cctx)
}

func (d *db) Name() string                    { return Name }
func (d *db) Granularity() engine.Granularity { return engine.PerRecord }

// PrefersSeparateCommits is true on a shared stream (commit=batch): a
// commit of several messages is an atomic batch, which the server stages
// in a file store of its own on R1 streams (milliseconds per batch), while
// single-message commits without checks go as plain publishes in flight
// together. With one writer a group of commits is one message, so
// gathering pays.
func (d *db) PrefersSeparateCommits() bool { return !d.wal }
func (d *db) Watch(ctx context.Context) <-chan struct{} {
	return d.notifier.Subscribe(ctx)
}

// Close completes every submitted commit, then stops the consumer, the
// connection and the embedded server.
func (d *db) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("jetstream: close: %w", engine.ErrClosed)
	}
	d.closed = true
	d.mu.Unlock()
	d.signal()
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
	if d.consumer != nil {
		d.consumer.Stop()
	}
	if d.nc != nil {
		d.nc.Close()
	}
	stopEmbedded(d.srv)
	d.dirLock.Release()
}

func (d *db) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
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
