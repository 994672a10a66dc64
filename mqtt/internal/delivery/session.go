// Package delivery is a session's sending side: what reaches a client
// from the message log, from the broker's in-memory routing, from replays
// of history and from table subscriptions, and the QoS 1 and QoS 2
// exchanges that carry it, with their state in the store.
//
// A Session is fed by its member of the broker's router over the message
// log (while the session keeps up; read from the log from its checkpoint
// while it catches up), and by a queue of in-memory deliveries (QoS 0
// publications, shared subscriptions, retained messages). Its sender
// goroutine runs only while there is work, so an idle session holds none.
// QoS 2 deliveries are recorded in session.OutTable before their PUBLISH,
// and after PUBREC before their PUBREL, so a reconnect or restart re-sends
// PUBREL, never the PUBLISH again. The acknowledged checkpoint, never past
// an undelivered message, is persisted in the session record.
package delivery

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/route"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/internal/tabletopic"
	"github.com/tidemark-io/tidemark/mqtt/internal/workers"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Conn is what a session's delivery needs of its client's connection.
// Its methods are safe for concurrent use; those that queue (Push,
// LaterDelivery, Ack) keep the order of their calls.
type Conn interface {
	// Context ends when the connection does.
	Context() context.Context
	// Logger logs on behalf of the connection.
	Logger() Logger
	// V5 reports whether the client speaks MQTT 5.0.
	V5() bool
	// MayRead reports whether the client may receive a message
	// published on topic now (the access rules may have changed since
	// it subscribed).
	MayRead(topic string) bool
	// Write writes p and flushes it.
	Write(p packet.Packet) error
	// WriteBuffered writes p into the connection's buffer; Flush, or
	// the next write that flushes, sends it.
	WriteBuffered(p packet.Packet) error
	// TryWrite writes p, with a topic alias applied as ApplyAlias does,
	// only if that takes no waiting: written is false when another
	// writer holds the connection or has packets buffered. flushed is
	// false when the socket did not take all at once; the rest stays
	// buffered for the next Flush.
	TryWrite(p *packet.Publish) (written, flushed bool, err error)
	// InPassing reports whether TryWrite can ever take a write on this
	// connection, so a caller that would be refused builds no packet.
	InPassing() bool
	// ApplyAlias gives p a topic alias when the client takes them.
	ApplyAlias(p *packet.Publish)
	// Flush sends what is buffered.
	Flush()
	// Push queues e in the connection's acknowledgement FIFO, behind
	// what is queued. False means the connection is ending.
	Push(e Pending) bool
	// Send is Push, except that when nothing is queued and e's commit
	// has completed it finishes e from the calling goroutine, as the
	// FIFO's loop would, instead of handing it over: what it writes
	// stays buffered until Flush. sent says it did.
	Send(e Pending) (ok, sent bool)
	// LaterDelivery adds write to the connection's pending commit of
	// delivery state and queues e for when that commit completes.
	LaterDelivery(write StateWrite, e Pending) bool
	// Ack queues p behind the connection's pending commit, for the read
	// loop (an acknowledgement of the client's packet).
	Ack(p packet.Packet) bool
	// Fail ends the connection after err; Warn logs what failed first.
	Fail(err error)
	Warn(what string, err error)
	// Disconnect ends the connection, telling a 5.0 client rc and why.
	Disconnect(rc packet.ReasonCode, why string)
	// Delivered reports a PUBLISH with packet id pi (0 at QoS 0) written
	// to the client, for the broker's hooks.
	Delivered(pi uint16)
}

// Logger logs on behalf of a connection.
type Logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

// Pending is an entry of a connection's acknowledgement FIFO that a
// session queues: once H (if set) completes, Pkt (if set) is written and
// Then runs.
type Pending struct {
	Pkt packet.Packet
	// Ack, when Pkt is nil, is the type of a success acknowledgement of
	// packet id PI to write, with no packet value built for it.
	Ack packet.Type
	PI  uint16 // Pkt's packet id
	H   *engine.Handle
	// Delivered: Pkt is a PUBLISH to the client (Conn.Delivered once
	// written).
	Delivered bool
	// TooLarge, when set, runs instead of ending the connection when Pkt
	// is over the client's maximum packet size.
	TooLarge func()
	Then     func()
	// Notify, when set, is told of the same as TooLarge and Then, after
	// them: an exchange's entries say it without a closure each.
	Notify Notified
}

// Notified is told what became of a Pending entry: TooLarge when its
// packet was over the client's maximum packet size (instead of the
// connection ending), then Done once the entry is finished.
type Notified interface {
	TooLarge()
	Done()
}

// StateWrite adds writes of delivery state to a transaction (see
// Conn.LaterDelivery).
type StateWrite interface {
	WriteState(tx *table.Tx) error
}

// Env is what the sessions of one broker share: its store and router,
// and the settings of delivery. Set its fields before the first New; an
// Env is used by pointer and never copied.
type Env struct {
	// Parts is the store: a session's state is in its client id's
	// partition, and the message log in every partition. Replays and
	// table subscriptions read the first partition, which is the whole
	// store unless the log is split (the broker refuses them then).
	Parts   *table.Partitions
	Router  *route.Router
	Runners *workers.Pool
	// Counters counts deliveries, drops and the in-flight gauge.
	Counters *counters.Counters
	// Tables is the table namespace, for table subscriptions.
	Tables tabletopic.Space
	// Group is how many deliveries' records may share one commit.
	Group int
	// CheckpointEvery bounds how long a completed delivery waits for a
	// checkpoint write; RetentionEvery, how long a checkpoint that moved
	// only over other sessions' messages does.
	CheckpointEvery, RetentionEvery time.Duration
	// IndexEvery, when positive, is how long a session's checkpoint
	// writes while it is connected may leave its index entries as they
	// are (session.Record.IndexLazily); zero moves them at every write.
	// Only for a store no other node reads: another node's retention
	// pass would find every such entry stale and write it again.
	IndexEvery time.Duration
	// MaxInflightBytes bounds the payload bytes in flight per session
	// (0: no bound).
	MaxInflightBytes int64
	// MaxLazy bounds the exchange endings a session holds back (see
	// lazyEnds); MaxStateDeletes the completion marks one checkpoint
	// commit drops: both keep a commit within the engine's limit.
	MaxLazy, MaxStateDeletes int
	// OnStore runs a store call on the broker's store goroutines (where
	// a commit's deep stack is already grown).
	OnStore func(func())
	// PostStore, when set, runs work on the same goroutines without
	// waiting for it (timed checkpoints, see Session.checkpointPosted);
	// once they ended, in the caller.
	PostStore func(func())
	// BeforeCheckpoint, when set, runs before a checkpoint commit is
	// submitted (a test hook).
	BeforeCheckpoint func(client string)
	// Joined, when set, is told of the shared subscriptions of a session
	// about to join the route, and of each one a joined session is about
	// to add, from the session's goroutines and with no lock held; it
	// must not block.
	Joined func(client string, shares []topic.Subscription)

	// publishes holds the PUBLISH packets of writes in passing (see
	// SendNow) and of senders' runs (Session.pub), which no session keeps
	// between messages.
	publishes sync.Pool
	// behind counts the sessions whose senders are behind the log (see
	// Behind).
	behind atomic.Int64
}

// Behind reports whether some session's sender has a backlog of log
// messages to send (see Session.noteBehind). Many publishers' read loops
// take the processors in turn with one subscriber's sender, which then
// gets a share of one goroutine among fifty: at 50 QoS 2 publishers its
// deliveries trailed their acknowledgements by half a second. A
// publisher's read loop that yields its processor after each group while
// this holds lets the sender catch up (a subscriber's does not: its
// acknowledgements are what frees the sender's window); yielding never
// waits, so a sender held up by its own client holds up no publisher. A
// sender that waits for its client's window keeps the mark it had, and
// the publishers keep yielding: a yield with nothing else to run returns
// at once, and one with work waiting runs that work first, which is what
// a busy broker should do anyway.
func (e *Env) Behind() bool { return e.behind.Load() > 0 }

// Session is one online session's sending side (see the package doc). A
// Session lives as long as its connection.
type Session struct {
	env *Env
	// db is the partition holding the session's state.
	db     *table.DB
	conn   Conn
	ctx    context.Context
	log    Logger
	client string
	v5     bool
	// rec is the session record; the session writes its delivery state
	// (checkpoint, packet ids, subscriptions) into it under recordMu.
	rec    *session.Record
	window int
	lazy   lazyEnds

	mu   sync.Mutex
	subs []topic.Subscription // the session's subscriptions
	// recordMu is held from building a write of the session record to
	// submitting it, so the record's writes commit in the order they were
	// built: a checkpoint built before a SUBSCRIBE's write and committed
	// after it would drop the new subscription, or move the checkpoint
	// back below completion marks the later write already swept. Never
	// waited for on a store goroutine (see Env.OnStore; a posted
	// checkpoint only tries it), which would let a full set of them wait
	// on writers that wait for a store goroutine.
	recordMu sync.Mutex
	// stopped, under recordMu, says Stop ran: no write but the final one
	// may follow (a posted checkpoint, see checkpointPosted, may come
	// late).
	stopped bool
	// since holds, per plain subscription filter, the log position it was
	// made at: it matches only messages after it, so a message published
	// before the SUBSCRIBE that the sender reaches later is not delivered
	// (nor delivered twice with its retained copy).
	since sinceMarks
	// queued counts PUBLISHes waiting in grp or the connection's FIFO.
	queued atomic.Int32
	// grp holds the records of QoS 2 deliveries not yet committed
	// (sender only; see flushGroup).
	grp      pendingGroup
	inflight map[uint16]*outMsg
	// inflightQ1 counts the QoS 1 ones in inflight: a checkpoint lists
	// them, and most checkpoints of a QoS 2 subscriber find none, without
	// walking a window of thousands.
	inflightQ1 int
	// inflightBytes sums the payload bytes of inflight, for
	// Env.MaxInflightBytes.
	inflightBytes int64
	resumed       map[logpos.Pos]*outMsg // restored QoS 2 state awaiting its log event
	done          map[logpos.Pos]bool    // QoS 2 completed above the checkpoint
	// ending holds the packet ids of ended QoS 2 exchanges whose record
	// delete is held back (see lazyEnds), with their log positions: the
	// ids are not reused and the marks not dropped until it commits.
	ending   map[uint16]logpos.Pos
	nextPI   uint16
	sentHigh logpos.Vec // the furthest log position ever sent
	// q1ids holds the packet ids of QoS 1 deliveries unacknowledged when
	// the session was last persisted, by log position, for their re-send.
	q1ids map[logpos.Pos]uint16
	// liveFrom is the log head when this connection came online: QoS 0
	// deliveries come only from messages after it.
	liveFrom logpos.Vec
	freed    chan struct{}
	// wroteRows says the session may hold rows this connection wrote or
	// restored (an outbound QoS 2 record, and so maybe a completion
	// mark); leaving says the next record write is the one that takes
	// the session offline with no rows of the connection's own side, as
	// PersistLast was told (see session.Record.Rowless).
	wroteRows, leaving atomic.Bool

	sub *table.PartitionMember
	// isBehind says the session counts in Env.behind; sender only.
	isBehind bool
	// sinceBehind counts the log messages sent since the backlog was
	// last looked at; sender only.
	sinceBehind int
	direct      directQueue
	persisted   logpos.Vec

	// replays holds the subscriptions replaying history, by filter (see
	// replay.go); their forwarders hand events over on replayCh, made
	// with the session's first replay (under mu; see replayChan).
	replays  map[string]*Replay
	replayCh chan replayItem
	// posFilters holds the plain subscription filters whose deliveries
	// carry their log position (PropPosition).
	posFilters map[string]bool
	// tables holds the readers of the subscriptions under the tables
	// prefix, by filter (see tables.go); they hand deliveries over on
	// tableCh, made with the session's first one (under mu).
	tables  map[string]*tableFeed
	tableCh chan tableItem

	// progress counts completed QoS 1/2 deliveries; persisted at
	// persistedProgress, at persistedAt.
	progress          atomic.Uint64
	persistedProgress atomic.Uint64
	persistedAt       time.Time
	// persistAsk asks the sender for a checkpoint write. A session has no
	// ticker: the first delivery completed after a write arms a timer of
	// Env.CheckpointEvery (armed), a window's worth of them (at most
	// persistEvery: a client's window may be 65,535) asks at once, so a
	// crash re-sends no more than that, and retention asks an
	// idle session whose checkpoint moved over others' messages (asked).
	// An idle session costs no wake-ups.
	persistAsk atomic.Bool
	armed      atomic.Bool
	asked      atomic.Bool

	snd sender
	// pub is the sender's PUBLISH for a delivery written at once (see
	// deliver): built in place, it costs no allocation per delivery. Taken
	// from Env.publishes for a run of the sender and put back when the
	// sender ends, so an idle session holds none, and a fleet whose
	// sessions each get one message at a time allocates none either.
	// Sender only.
	pub *packet.Publish
}

// pendingGroup is the sender's pending commit: the records of QoS 2
// deliveries taken since its last flush, and their PUBLISHes, which wait
// for that commit.
type pendingGroup struct {
	tx      *table.Tx
	entries []Pending
}

// Restored is what a present session keeps in the store beside its
// record: the values of its OutTable records (outbound QoS 2 exchanges)
// and the log positions of its completion marks in DoneTable.
type Restored struct {
	Out  [][]byte
	Done []logpos.Pos
}

// New restores the sending side of the session of client, whose record
// is rec, on conn; window is the client's receive maximum, head the log
// head read once the connection was registered (QoS 0 deliveries come
// only from messages after it), and restored the rest of a present
// session's state (nil for a new session). Start begins sending.
func New(env *Env, conn Conn, client string, rec *session.Record, window int, head logpos.Vec, restored *Restored) *Session {
	// The in-flight maps are made on first use: an idle session holds none.
	o := &Session{
		env: env, db: env.Parts.For(client), conn: conn, ctx: conn.Context(), log: conn.Logger(), client: client, v5: conn.V5(),
		rec: rec, window: window,
		freed:     make(chan struct{}, 1),
		persisted: rec.Checkpoint, nextPI: rec.NextPI, sentHigh: rec.SentHigh,
	}
	o.subs = make([]topic.Subscription, 0, len(o.rec.Subs))
	for _, s := range o.rec.Subs {
		o.subs = append(o.subs, s.Subscription(o.client))
		if s.Since != nil {
			o.since.set(s.Filter, *s.Since)
		}
		if s.Pos {
			if o.posFilters == nil {
				o.posFilters = map[string]bool{}
			}
			o.posFilters[s.Filter] = true
		}
	}
	for _, q := range o.rec.Q1 {
		if o.q1ids == nil {
			o.q1ids = map[logpos.Pos]uint16{}
		}
		o.q1ids[q.Pos] = q.PI
	}
	o.liveFrom = head
	if restored != nil {
		o.restoreRecords(restored.Out)
		o.restoreDone(restored.Done)
		if len(restored.Out) > 0 || len(restored.Done) > 0 {
			o.wroteRows.Store(true)
		}
	}
	return o
}

// Start re-sends the restored QoS 2 state and starts the sender. It runs
// once the CONNACK is written, on the read loop or the ack loop.
func (o *Session) Start() {
	// Re-send in the order first sent (log order), not map order: a
	// topic's QoS 2 messages must reach the client in the order they were
	// published [MQTT-4.6.0-6].
	restored := make([]*outMsg, 0, len(o.inflight))
	for _, om := range o.inflight {
		restored = append(restored, om)
	}
	slices.SortFunc(restored, func(a, b *outMsg) int {
		switch {
		case a.pos.Less(b.pos):
			return -1
		case b.pos.Less(a.pos):
			return 1
		}
		return 0
	})
	for _, om := range restored {
		if om.state == outPubrec {
			_ = o.conn.Write(&packet.Pubrel{PacketID: om.pi})
		} else {
			// The stored state keeps the message, not how it matched:
			// match it again for its subscription identifiers and retain
			// as published.
			o.mu.Lock()
			_, ids, rap, _ := o.match(om.msg, om.pos)
			o.mu.Unlock()
			d := delivery{msg: om.msg, qos: 2, ids: ids, retain: om.msg.Retain && rap, dup: true}
			_ = o.conn.Write(o.publishPacket(d, om.pi))
		}
	}
	if err := o.subscribe(o.rec.Checkpoint); err != nil {
		o.log.Error("subscribe to the message log", "err", err)
		o.conn.Fail(err)
		o.snd.end()
		return
	}
	o.begin() // catch up from the checkpoint
	o.startTableFeeds()
}

// subscribe starts the session's member of the router: it catches up
// from from, then joins the route.
func (o *Session) subscribe(from logpos.Vec) error {
	m, err := o.env.Router.Member(from, func(ev table.Event) bool { return o.wants(ev.ID) }, o.wake)
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.sub = m
	o.mu.Unlock()
	if o.env.Joined != nil {
		// Told before the join, so that no message of its groups goes
		// to it ahead of their queues.
		var shares []topic.Subscription
		o.mu.Lock()
		for _, s := range o.subs {
			if s.Group != "" {
				shares = append(shares, s)
			}
		}
		o.mu.Unlock()
		if len(shares) > 0 {
			o.env.Joined(o.client, shares)
		}
	}
	o.env.Router.Join(o.client, m)
	return nil
}

// skipTruncated moves the member, in the partition cause (a
// *table.PartitionError) names, to the oldest retained message after
// retention removed messages the session had not received yet.
func (o *Session) skipTruncated(cause error) bool {
	var pe *table.PartitionError
	if !errors.As(cause, &pe) {
		return false
	}
	st, err := o.env.Parts.DB(pe.Partition).LogStats(o.ctx)
	if err != nil || st.Floor == 0 {
		return false
	}
	o.log.Warn("retention removed queued messages before the session received them", "partition", pe.Partition, "err", cause)
	o.env.Counters.DroppedRetention.Add(1)
	o.sub.RestartPartition(pe.Partition, table.Cursor{Key: st.Floor - 1})
	return true
}

// posOf returns the position of ev, an event of the session's member or
// of a replay (which reads the first partition).
func (o *Session) posOf(ev table.Event) logpos.Pos {
	part := 0
	if o.sub != nil { // set before the sender starts, never changed
		part = max(o.sub.Partition(ev), 0)
	}
	return logpos.At(part, ev.Cursor())
}

// checkpointOf returns the acknowledged checkpoint of sub, the
// session's member.
func checkpointOf(sub *table.PartitionMember) logpos.Vec {
	v, _ := logpos.FromCursors(sub.Checkpoint()) // the router's count of partitions
	return v
}

// currentSub returns the session's member of the router.
func (o *Session) currentSub() *table.PartitionMember {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sub
}

// wants reports whether any plain subscription of the session matches.
func (o *Session) wants(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		if s.Group == "" && topic.Match(s.Filter, name) {
			return true
		}
	}
	return false
}

// Shares returns the shares the session subscribes to.
func (o *Session) Shares() []topic.Share {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []topic.Share
	for _, s := range o.subs {
		if s.Group != "" {
			out = append(out, topic.Share{Group: s.Group, Filter: s.Filter})
		}
	}
	return out
}

// Unindex removes the session's subscriptions from the broker's index:
// each by its filter, so a teardown costs what the session's own
// subscriptions cost, not a walk of every subscription in the index.
func (o *Session) Unindex() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		o.env.Router.Index().Remove(o.client, s.Group, s.Filter)
	}
}
