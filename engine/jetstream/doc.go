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
//   - leader: the server (its name) to lead the stream, on a cluster with
//     replicas of 2 or more. Opening asks the current leader to step down
//     in its favour and waits until it leads, so that the streams of
//     several partitions (table.OpenPartitions) can lead on different
//     servers. JetStream keeps no preference, so the engine looks every
//     leader_check (30s by default, at least 100ms) and moves the leader
//     back once an election moved it away and the server is a current
//     replica again. Every node sharing a stream should ask for the same
//     server, or they move its leader back and forth.
//   - commit: "wal" (the default with the embedded server) or "batch"
//     (the default, and the only choice, with "url"); see below. A stream
//     records the protocol it was created with and refuses the other.
//   - tombstone_ttl: how long a deleted key's delete marker stays in the
//     stream and in each node's index; 60s by default, at least 1s.
//   - max_batch: the most messages one atomic batch may carry; by default
//     the limit the engine configures on the embedded server (16384), or
//     the nats-server default (1000) with "url". A server that reports a
//     lower limit lowers it at run time. MaxCommitEntries reports it, so
//     callers split larger commits (engine.MaxCommitEntries).
//   - reserve_mb: with the embedded server, the free space in MiB
//     commits leave on the data directory's file system; 64 by default
//     (see A full disk).
//   - start_timeout: how long opening waits for the servers, a JetStream
//     meta leader, enough servers for the replicas and the stream's
//     leader, when the caller's context has no deadline; 2m by default.
//     Each request sent while opening has a deadline of its own and is
//     sent again while a starting cluster cannot answer it yet, with a
//     log line saying what it waits for (see request.go).
//   - index_cache_mb: the block cache of the local index (see Reads);
//     64 by default.
//   - stall_timeout: how long the index consumer may deliver nothing
//     while the stream holds messages it has not brought before it is
//     recreated, with a warning; 5s by default, at least 1s. While the
//     engine opens, a third of it and at least 2s (see feed.go).
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
// costs the server far less than two (this is the batch protocol's gather
// rule on the engines' shared queue, engine/internal/group). The committer applies its own
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
// JetStream has no ordered key index, so each engine keeps one (see
// Memory): an ordered consumer over the whole stream (the last message per
// subject on open, then every new message) applies each batch, whole, to
// it, in one commit. A Snapshot is a snapshot of that store: it sees a
// prefix of the stream, never part of a batch, including every commit this
// engine completed before it was taken and the other nodes' commits this
// engine had received by then. A check decided on this index against a
// value another node committed but this node has not received yet fails
// with engine.ErrConflict (a retry after re-reading succeeds); it never
// lets a stale check pass, since the server compares sequences. ScanLog
// reads the log subject straight from the stream with batched direct
// gets, but only up to the last sequence the index applied, so a reader
// that saw log key K finds every commit up to K in a snapshot taken
// after; on a replicated stream a follower may answer, so a scan keeps
// reading until it reached the newest entry the index had seen when the
// scan began. Watch fires once the index has applied new log entries: for
// this engine's commits after their handles completed, for other nodes'
// commits as they arrive. With commit=wal the consumer only loads the index at
// open; after that the committer keeps it, and ScanLog decodes the log
// entries of the group messages on "<stream>.x.l" up to the last group
// the index applied.
//
// Open returns once the index holds the stream as its leader had it when
// loading began. The consumer runs on one server of the stream, which
// the server picks; a replica that has just restarted is still catching
// up, and a consumer there reports nothing pending once it delivered
// what that replica holds. Open takes such an end for the stream's only
// when the consumer's server leads the stream or is a replica the leader
// counts current with no lag (otherwise it recreates the consumer
// elsewhere), and when the index holds the newest message the leader
// has. A replica rebuilding its store can count as current and still
// hold only part of the stream, so while opening a consumer that
// delivers nothing for the opening limit (see stall_timeout) is
// recreated whatever it reports. Trusting the consumer alone served a
// node a stale index: a broker starting on it read session records older
// than what another node had written since, and wrote one back.
//
// # Memory
//
// The index is a Pebble store on local disk (engine/pebble/localkv), not
// in memory: a directory of its own under Options.Dir
// (jetstream-index-<random>; under the system's temporary directory for
// an engine with "url" and no Dir),
// made empty at every open, rebuilt from the stream, and removed on
// Close; the next open in the same place removes one a crash left. It
// holds, per live key, the key, its value and its stream sequence (and
// for a deleted key on a shared stream, until tombstone_ttl, a delete
// marker), so the disk holds the live data once more than the stream.
// Being rebuilt at every open, it has no write-ahead log and never syncs.
// In memory it takes its block cache (index_cache_mb, 64 MiB by default)
// and its memtables (16 MiB each, two or three while one flushes),
// whatever the number of keys.
// Reads (Get, Iter, the checks of a commit) come from the memtables, the
// cache or the page cache; a value is copied out once per read.
//
// What else the engine keeps grows with traffic, not with the data: the
// delete markers of the last tombstone_ttl (a key and a sequence each),
// the keys written in the last two seconds (commit=wal, for the
// materializer), the recent log (commit=wal: 8 MiB at most), the last
// 4096 batch ids. The embedded nats-server runs in the engine's process
// and keeps an index of its own: about 150 bytes per subject, so per live
// key (20 MB for 150,000 keys); with "url" that cost is on the NATS
// servers. BenchmarkReopenMemory measures it: 50,000 values of 1 KB,
// reopened, took 105 MB of Go heap (136 MB resident) with the index in
// memory, 18 MB (67 MB resident) on disk.
//
// # Limits
//
// A key's subject keeps only
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
// so the lookup after it is final. If the stream does not answer the
// lookup within 30 seconds, the transaction's commits fail with an error
// wrapping engine.ErrWriteFailed; until it answers, the engine publishes
// nothing else (its checks are decided on an index that could disagree
// with the stream), fails commits at once, logs an error every 10
// seconds and reports the failure through Health; once it answers, a
// transaction that did land is applied to the index. A connection the
// server drops is made again at once (every 100 ms while it fails), and
// the log says so.
//
// Reads from the stream (log scans, the index load at open) go in pages
// of at most 1 MiB (or one larger message), at most four in flight per
// engine: the server queues a page whole for the connection, and drops a
// connection that has more than its max_pending (64 MiB) queued as a slow
// consumer. A page that ends before the server's end of batch fails the
// read rather than let it skip messages.
//
// # A full disk
//
// With the embedded server the engine keeps the disk from filling, since
// nats-server does not recover from a full one by itself: it limits a
// store to 75% of the space free when it starts and then refuses every
// publish for good once the stream reaches that, and a write that fails
// (ENOSPC) leaves the stream's file store failing every later write
// without an answer until the server restarts. So the engine starts the
// server with a store limit it never reaches (1 PiB) and, before each
// group of commits, checks the file system's free space (statfs, measured
// again at least every 20ms and whenever the admitted bytes could pass
// it): a group whose bytes, counted three times (the transaction message,
// the materializer's copy of its keys, the index's copy), would leave
// less free than reserve_mb (default 64) plus the index's memtables is
// refused with engine.ErrWriteFailed wrapping syscall.ENOSPC. From the
// first refusal every commit is refused at once and Health reports it;
// once the reserve plus 1 MiB is free and a probe file of 1 MiB can be
// written and synced in the data directory, commits are taken again,
// with no restart: the server never saw a failed write. A publish the
// server refuses for lack of resources (err_code 10023 or 10047; an
// external server's limits) fails its commits with engine.ErrWriteFailed
// as well. With "url" the server's disk is not the engine's to watch.
//
// The server's own writes can still meet a full disk: another process
// takes the reserve between two checks, the materializer copies keys
// after the disk filled, or another node writes to a shared stream. The
// stream's file store then keeps the error and fails every later write
// without an answer; the engine learns of it from the server's log
// ("critical write error"), refuses commits with engine.ErrWriteFailed
// (the one in flight fails at once: it was not stored, or it was the
// failed write, whose outcome engine.ErrWriteFailed leaves open) and
// reports it on Health. Once space returns it shuts JetStream down and
// enables it again in the same server, which reloads the stream from its
// files as a restart would (a partial last record is dropped), and takes
// commits again. Nothing acknowledged is lost: an acknowledgement comes
// only after the server wrote (and under SyncAlways synced) the message.
//
// # Build
//
// Build with the nojetstream tag (go build -tags nojetstream) to leave the
// engine and its dependencies out of a binary. A binary built without it
// still registers the name, and engine.Open("jetstream") fails with
// engine.ErrUnavailable saying which tag removed it.
package jetstream

// Name is the registered engine name.
const Name = "jetstream"
