package mqtt

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// outbound is a session's sending side: its member of the broker's router
// over the message log (fed by the router while the session keeps up; read
// from the log from the session's checkpoint while it catches up), plus a
// queue of in-memory deliveries (QoS 0 publications, shared subscriptions,
// retained messages). QoS 2 deliveries are recorded in tableOut before
// their PUBLISH, and after PUBREC before their PUBREL, so a reconnect or
// restart re-sends PUBREL, never the PUBLISH again.
type outbound struct {
	c      *conn
	window int

	mu   sync.Mutex
	subs []topic.Subscription // the session's subscriptions
	// recordMu is held from building a write of the session record to
	// submitting it, so the record's writes commit in the order they were
	// built: a checkpoint built before a SUBSCRIBE's write and committed
	// after it would drop the new subscription, or move the checkpoint
	// back below completion marks the later write already swept. Never
	// taken on a store goroutine (see onStore), which would let a full set
	// of them wait on writers that wait for a store goroutine.
	recordMu sync.Mutex
	// since holds, per plain subscription filter, the log position it was
	// made at: it matches only messages after it, so a message published
	// before the SUBSCRIBE that the sender reaches later is not delivered
	// (nor delivered twice with its retained copy).
	since sinceMarks
	// queued counts PUBLISHes waiting in grp or the connection's FIFO.
	queued atomic.Int32
	// grp holds the records of QoS 2 deliveries not yet committed
	// (sender only; see flushGroup).
	grp      group
	inflight map[uint16]*outMsg
	// inflightBytes sums the payload bytes of inflight, for
	// Options.MaxInflightBytes.
	inflightBytes int64
	resumed       map[table.Cursor]*outMsg // restored QoS 2 state awaiting its log event
	done          map[table.Cursor]bool    // QoS 2 completed above the checkpoint
	// ending holds the packet ids of ended QoS 2 exchanges whose record
	// delete is held back (see lazyEnds), with their log positions: the
	// ids are not reused and the marks not dropped until it commits.
	ending   map[uint16]table.Cursor
	nextPI   uint16
	sentHigh table.Cursor // the furthest log position ever sent
	// q1ids holds the packet ids of QoS 1 deliveries unacknowledged when
	// the session was last persisted, by log position, for their re-send.
	q1ids map[table.Cursor]uint16
	// liveFrom is the log head when this connection came online: QoS 0
	// deliveries come only from messages after it.
	liveFrom table.Cursor
	freed    chan struct{}

	sub       *table.Member
	direct    directQueue
	persisted table.Cursor

	// replays holds the subscriptions replaying history, by filter (see
	// replay.go); their forwarders hand events over on replayCh, made
	// with the session's first replay (under mu; see replayChan).
	replays  map[string]*replay
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
	// Options.CheckpointEvery (armed), a window's worth of them (at most
	// persistEvery: a client's window may be 65,535) asks at once, so a
	// crash re-sends no more than that, and retention asks an
	// idle session whose checkpoint moved over others' messages (asked).
	// An idle session costs no wake-ups.
	persistAsk atomic.Bool
	armed      atomic.Bool
	asked      atomic.Bool

	snd sender
	// pub is the sender's PUBLISH for a delivery written at once (see
	// deliver): built in place, it costs no allocation per delivery. Made
	// for a run of the sender and let go when the sender ends, so an idle
	// session holds none. Sender only.
	pub *packet.Publish
}

// newOutbound restores the sending side of c's session; present says the
// session existed (a new one has no delivery state to read), head is the
// log head read once the connection was registered.
func newOutbound(c *conn, window int, present bool, head table.Cursor, rows sessionRows) (*outbound, error) {
	// The in-flight maps are made on first use: an idle session holds none.
	o := &outbound{
		c: c, window: window,
		freed:     make(chan struct{}, 1),
		persisted: c.rec.Checkpoint, nextPI: c.rec.NextPI, sentHigh: c.rec.SentHigh,
	}
	o.subs = make([]topic.Subscription, 0, len(c.rec.Subs))
	for _, s := range c.rec.Subs {
		o.subs = append(o.subs, s.Subscription(c.client))
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
	for _, q := range c.rec.Q1 {
		if o.q1ids == nil {
			o.q1ids = map[table.Cursor]uint16{}
		}
		o.q1ids[q.Pos] = q.PI
	}
	o.liveFrom = head
	if !present {
		return o, nil
	}
	o.restoreRecords(rows.out)
	o.restoreDone(rows.done)
	return o, nil
}

// start re-sends the restored QoS 2 state and starts the sender. It runs
// once the CONNACK is written, on the read loop or the ack loop.
func (o *outbound) start() {
	c := o.c
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
			_ = c.write(&packet.Pubrel{PacketID: om.pi})
		} else {
			// The stored state keeps the message, not how it matched:
			// match it again for its subscription identifiers and retain
			// as published.
			o.mu.Lock()
			_, ids, rap, _ := o.match(om.msg, om.pos)
			o.mu.Unlock()
			d := delivery{msg: om.msg, qos: 2, ids: ids, retain: om.msg.Retain && rap, dup: true}
			_ = c.write(o.publishPacket(d, om.pi))
		}
	}
	if err := o.subscribe(c.rec.Checkpoint); err != nil {
		c.log.Error("subscribe to the message log", "err", err)
		c.fail(err)
		o.snd.end()
		return
	}
	o.begin() // catch up from the checkpoint
	o.startTableFeeds()
}

// subscribe starts the session's member of the router: it catches up
// from from, then joins the route.
func (o *outbound) subscribe(from table.Cursor) error {
	b := o.c.b
	m := b.router.Member(from, func(ev table.Event) bool { return o.wants(ev.ID) }, o.wake)
	o.mu.Lock()
	o.sub = m
	o.mu.Unlock()
	b.router.Join(o.c.client, m)
	return nil
}

// skipTruncated moves the member to the oldest retained message after
// retention removed messages the session had not received yet.
func (o *outbound) skipTruncated(cause error) bool {
	c := o.c
	st, err := c.b.db.LogStats(c.ctx)
	if err != nil || st.Floor == 0 {
		return false
	}
	c.log.Warn("retention removed queued messages before the session received them", "err", cause)
	c.b.metrics.DroppedRetention.Add(1)
	o.sub.Restart(table.Cursor{Key: st.Floor - 1})
	return true
}

// currentSub returns the session's member of the router.
func (o *outbound) currentSub() *table.Member {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sub
}

// wants reports whether any plain subscription of the session matches.
func (o *outbound) wants(name string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		if s.Group == "" && topic.Match(s.Filter, name) {
			return true
		}
	}
	return false
}

// unindex removes the session's subscriptions from the broker's index:
// each by its filter, so a teardown costs what the session's own
// subscriptions cost, not a walk of every subscription in the index.
func (o *outbound) unindex() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.subs {
		o.c.b.router.Index().Remove(o.c.client, s.Group, s.Filter)
	}
}
