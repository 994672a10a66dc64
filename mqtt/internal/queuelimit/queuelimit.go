// Package queuelimit enforces the per-session queue limits of offline
// sessions (the broker's Options.MaxQueuedMessages and
// Options.MaxQueuedBytes), as part of its retention passes.
package queuelimit

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// A session's queue is its own messages: the messages of the log after
// its persisted checkpoint that one of its plain subscriptions of QoS 1
// or 2 matches, as delivery matches them (topic filter, no-local, and the
// position a subscription was made at). Messages of other topics are not
// counted, however many there are. Shared subscriptions are not counted
// either: a group's messages go to members that are online, so an offline
// session queues none for them. Messages are counted until delivery
// passes them, whether they expired meanwhile or not; access rules are
// applied at delivery only.
//
// An offline session holding more than the limit loses its oldest: its
// persisted checkpoint moves to just before the newest limit-th of its
// messages, so it keeps exactly the newest limit; the loss is counted as
// dropped with reason "retention" (one per message) and logged. The
// byte limit sums the payloads of the same messages and cuts the same
// way, keeping the newest whose payloads fit (none when the newest alone
// is over it); with both, a session keeps the newest that fit both. An
// offline session further behind than the limits in log messages (or
// payload bytes) but within them in its own moves, losing nothing, to
// just before its oldest own message (or to the head when it has none),
// so it holds the log from there only. Either way the log below it can
// go.
//
// Online sessions are not cut: their clients' acknowledgements move
// their checkpoints, and the limit applies from the first pass after they
// disconnect. Nor is a session whose delayed will is still to be
// published: publishWill takes any write of the record before its own
// for the client's return and cancels the will, so the limit waits for
// the will to go. (Moving the checkpoint of a session that is being served
// would have to go through its delivery state; the log it holds is what
// its client has not acknowledged yet.)
//
// Cost. A pass reads the checkpoint index from the bottom in batches of
// queueBatch, up to the lowest position above which the log holds no
// more than the limit of messages (tailCount, which reads each message
// once; until it has, the first pass after a start reads up to the
// head), and stops earlier at the first batch holding a session with no
// more than the limit of messages behind it: every session above has
// fewer, so none can be over. The sessions of a batch are counted by one
// read of the log from the lowest point any of them has not been counted
// to, each message matched once through an index of the batch's
// subscriptions. Under the byte limit the same holds of payload bytes
// (read from each message's stored form without decoding the rest), and
// a session is passed over only when within both. The counts are kept
// in memory between passes (queueCount), so a pass reads only what was
// appended since, and dropped for sessions the pass did not reach (gone,
// online, or no longer behind). A pass still reads the record of every offline session it
// reaches, to see that its checkpoint and subscriptions are those
// counted.
//
// Races. A move writes the session record conditional on the version it
// read, so it never replaces a record the session (or anything else)
// wrote meanwhile. A connection of the same client id on this node waits
// for a move under way before it reads the session (see
// Limiter.BeginCut), and a move does not start while one is registered, so a resume never starts
// from the checkpoint a move is replacing. A connection on another node
// sharing the store may still read the record just before a move and
// write it back: it then resumes from the checkpoint it read or, when
// the log was truncated up to the move meanwhile, from the oldest message
// retained, as after any truncation above a checkpoint (counted as
// dropped there once more).

// Limiter enforces the queue limits; set its fields before the first
// Limit. Limit is safe to call from several goroutines: passes run one
// at a time.
type Limiter struct {
	// DB holds the session records and their checkpoint index the
	// limiter reads and moves; MessageLog, when set, the message log it
	// counts, partition Part of a split store (DB's own log when nil).
	// On a split store one limiter runs per pair of them, and a
	// session's limits hold in each partition of the log.
	DB         *table.DB
	MessageLog *table.DB
	Part       int
	Log        *slog.Logger
	Counters   *counters.Counters
	// MaxMessages and MaxBytes are the limits, in messages and payload
	// bytes of a session's own; 0 is no limit.
	MaxMessages int
	MaxBytes    int64
	// Online reports whether client is online on this node; such a
	// session is not cut.
	Online func(client string, part int, persisted table.Cursor) (table.Cursor, bool)
	// BeginCut registers a move of client's checkpoint, unless client
	// is online on this node (ok false), atomically with the broker's
	// registration of connections: a connection of client registered
	// after it waits for end before it reads its session.
	BeginCut func(client string) (end func(), ok bool)
	// BeforeCut, when set, runs before a move is committed (a test hook).
	BeforeCut func(client string)

	counts queueCounts
}

// queueBatch is how many sessions one log read of a pass counts.
const queueBatch = 1024

// msgLog returns the message log the limiter counts.
func (l *Limiter) msgLog() *table.DB {
	if l.MessageLog != nil {
		return l.MessageLog
	}
	return l.DB
}

// queueLimits are the limits a pass enforces; 0 is no limit.
type queueLimits struct {
	msgs  int
	bytes int64
}

// past reports whether n messages of size bytes are over a limit.
func (l queueLimits) past(n int, size int64) bool {
	return (l.msgs > 0 && n > l.msgs) || (l.bytes > 0 && size > l.bytes)
}

// size returns the payload bytes of the message ev as the byte limit
// counts them: 0 when there is none, so the log is not decoded for
// nothing.
func (l queueLimits) size(ev table.Event) int64 {
	if l.bytes == 0 {
		return 0
	}
	return int64(message.PayloadLen(ev.Value))
}

// queueCount is what a pass counted of one offline session, kept for the
// next: valid while the session's checkpoint and subscriptions (key) are
// the same.
type queueCount struct {
	key string
	// from is where the count starts: the checkpoint, or the truncation
	// floor when that was above it. upTo is where it ends.
	from, upTo table.Cursor
	// own counts the session's own messages in (from, upTo], total every
	// message of the log there; first is the position just before the
	// oldest own one and before the messages in (from, first] (when own
	// > 0). The ...Bytes fields sum the payloads of the same messages
	// (zero without a byte limit).
	own, total, before                int
	ownBytes, totalBytes, beforeBytes int64
	first                             table.Cursor
}

// queueCounts holds the counts between passes; mu also keeps passes of
// the limit one at a time.
type queueCounts struct {
	mu   sync.Mutex
	m    map[string]*queueCount
	tail tailCount
}

// tailCount counts the messages of the log, and their payload bytes
// under a byte limit, from where the first pass found its head, marking
// a position every so many, so that a pass knows above which position
// the log holds no more than the limits without reading it again.
type tailCount struct {
	upTo  table.Cursor
	count int
	bytes int64
	marks []tailMark // ascending; the first is the start, at count 0
}

// tailMark is a position of the log and the count of messages, and of
// their payload bytes, up to it.
type tailMark struct {
	pos   table.Cursor
	n     int
	bytes int64
}

// threshold brings t up to head and returns the lowest position it knows
// of above which the log holds no more than lim: no session at or above
// it can be over a limit.
func (t *tailCount) threshold(ctx context.Context, l *Limiter, head, floor table.Cursor, lim queueLimits) (table.Cursor, error) {
	if t.marks == nil {
		t.upTo, t.marks = head, []tailMark{{pos: head}}
		return head, nil
	}
	from := t.upTo
	if from.Less(floor) {
		from = floor
	}
	stepN, stepB := max(1, lim.msgs/64), max(1, lim.bytes/64)
	err := l.scanMessages(ctx, from, head, func(ev table.Event) bool {
		t.count++
		t.bytes += lim.size(ev)
		t.upTo = ev.Cursor()
		last := t.marks[len(t.marks)-1]
		if (lim.msgs > 0 && t.count-last.n >= stepN) || (lim.bytes > 0 && t.bytes-last.bytes >= stepB) {
			t.marks = append(t.marks, tailMark{pos: t.upTo, n: t.count, bytes: t.bytes})
		}
		// A mark more than a limit back is never the answer again: the
		// counts only grow. About 64 per limit are kept.
		for len(t.marks) > 1 && lim.past(t.count-t.marks[0].n, t.bytes-t.marks[0].bytes) {
			t.marks = t.marks[1:]
		}
		return true
	})
	if err != nil {
		return head, err
	}
	t.upTo = head
	if lim.past(t.count-t.marks[0].n, t.bytes-t.marks[0].bytes) {
		return head, nil
	}
	return t.marks[0].pos, nil
}

// queued is a session a pass considers.
type queued struct {
	client string
	subs   []session.Sub
	n      *queueCount
	at     uint64 // the last message countQueues counted it for
	part   int    // the partition of the log it is counted in
}

// queueKey identifies what a count depends on: the checkpoint and every
// subscription field that matching reads.
func queueKey(s *session.Record) string {
	var b strings.Builder
	b.WriteString(s.Checkpoint.String())
	for _, r := range s.Subs {
		b.WriteString(session.Sep + r.Filter + session.Sep + r.Group + session.Sep)
		b.WriteString(strconv.Itoa(int(r.QoS)))
		if r.NL {
			b.WriteString("n")
		}
		if r.Since != nil {
			b.WriteString("s" + r.Since.String())
		}
	}
	return b.String()
}

// owns reports whether the message ev is one of the session's own (see
// above). The message is decoded only for a no-local subscription.
func (q *queued) owns(ev table.Event) bool {
	if qos, ok := message.StoredQoS(ev.Value); ok && qos == 0 {
		// At most once: a QoS 0 message (in the log when nodes share
		// the store) reaches only sessions online as it is published.
		return false
	}
	var m *message.Message
	pos := logpos.At(q.part, ev.Cursor())
	for _, s := range q.subs {
		if s.Group != "" || s.QoS == 0 || !topic.Match(s.Filter, ev.ID) {
			continue
		}
		if s.Since != nil && s.Since.Covers(pos) {
			continue // published before the subscription was made
		}
		if s.NL {
			if m == nil {
				m = new(message.Message)
				if m.UnmarshalBinary(ev.Value) != nil {
					return false // delivery skips it too
				}
			}
			if m.From == q.client {
				continue
			}
		}
		return true
	}
	return false
}

// errScanned stops a read of the log at the end of what it was asked for.
var errScanned = errors.New("mqtt: scanned")

// scanMessages calls fn for each message of the log after from up to and
// including upTo, in log order, until fn returns false.
func (l *Limiter) scanMessages(ctx context.Context, from, upTo table.Cursor, fn func(table.Event) bool) error {
	if !from.Less(upTo) {
		return nil
	}
	_, err := l.msgLog().Follow(ctx, table.SubscribeOptions{Table: message.LogTable, Start: from, IncludeSuperseded: true, Composite: true,
		Hooks: table.Hooks{Live: func() bool { return false }}}, func(ev table.Event) error {
		if !upTo.Covers(ev.Key, ev.Index) || !fn(ev) {
			return errScanned
		}
		return nil
	})
	if err == nil || errors.Is(err, errScanned) {
		return nil
	}
	return err
}

// cursorBefore returns the position just before the log entry of ev: a
// resume from it starts with ev.
func cursorBefore(ev table.Event) table.Cursor {
	if ev.Index == 0 {
		return table.Cursor{Key: ev.Key - 1}
	}
	return table.Cursor{Key: ev.Key, Next: ev.Index}
}

// queueCuts sums what a pass dropped.
type queueCuts struct {
	sessions, dropped int
}

// Limit enforces MaxMessages and MaxBytes on the offline sessions behind
// head (see the package doc). Passes run one at a time.
func (l *Limiter) Limit(ctx context.Context, head table.Cursor) error {
	limit := queueLimits{msgs: l.MaxMessages, bytes: l.MaxBytes}
	q := &l.counts
	q.mu.Lock()
	defer q.mu.Unlock()
	st, err := l.msgLog().LogStats(ctx)
	if err != nil {
		return err
	}
	if limit.bytes == 0 && st.Entries <= uint64(limit.msgs) {
		clear(q.m) // no session can be over: nothing worth keeping
		return nil
	}
	if q.m == nil {
		q.m = map[string]*queueCount{}
	}
	var floor table.Cursor
	if st.Floor > 0 {
		floor.Key = st.Floor - 1 // the retained log starts above it
	}
	stop, err := q.tail.threshold(ctx, l, head, floor, limit)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var cuts queueCuts
	defer func() {
		if cuts.sessions > 0 {
			l.Log.Warn("sessions over the queued-message limit lost their oldest messages",
				"sessions", cuts.sessions, "dropped", cuts.dropped, "limit", limit.msgs, "limit_bytes", limit.bytes)
		}
	}()
	from := session.CheckpointPartition(l.Part) // where the partition's part of the index starts
	for from != "\xff" {
		var batch []*queued
		batch, from, err = l.queueBatch(ctx, from, stop, floor, seen)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			continue
		}
		if err := l.countQueues(ctx, batch, head, limit); err != nil {
			return err
		}
		done := false
		for _, e := range batch {
			if !limit.past(e.n.total, e.n.totalBytes) {
				done = true // every session above has less behind it
				continue
			}
			if err := l.advanceQueue(ctx, e, head, limit, &cuts); err != nil {
				return err
			}
		}
		if done {
			break
		}
	}
	for client := range q.m {
		if !seen[client] {
			delete(q.m, client)
		}
	}
	return nil
}

// queueBatch reads the next batch of offline sessions from the checkpoint
// index, from id from on, below stop; next is where the following batch
// starts ("\xff" when the index has no more below stop). Sessions online
// on this node, gone, online elsewhere, holding a will still to publish,
// or whose index entry is stale are left out (a stale entry's record has
// its own entry, read now or by a later pass).
func (l *Limiter) queueBatch(ctx context.Context, from string, stop, floor table.Cursor, seen map[string]bool) ([]*queued, string, error) {
	type entry struct {
		client string
		cp     table.Cursor
	}
	var entries []entry
	next := "\xff"
	err := l.DB.RangeFrom(ctx, session.CheckpointTable, from, func(r table.Record) bool {
		cp, client, ok := session.ParseCheckpointID(l.Part, r.ID)
		if !ok || !cp.Less(stop) {
			return false
		}
		if len(entries) == queueBatch {
			next = r.ID
			return false
		}
		// An online session is passed over; one idle since its checkpoint
		// was written is asked to write it again (see Limiter.Online), so
		// its entry moves up out of the way of the next passes.
		if _, on := l.Online(client, l.Part, cp); !on && !seen[client] {
			entries = append(entries, entry{client, cp})
		}
		return true
	})
	if err != nil {
		return nil, "", err
	}
	var batch []*queued
	for _, e := range entries {
		r, err := l.DB.Get(ctx, session.Table, e.client)
		if errors.Is(err, table.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		var s session.Record
		if session.Decode(r.Value, &s) != nil || s.Online || s.Will != nil || s.Checkpoint.Of(l.Part) != e.cp {
			continue
		}
		seen[e.client] = true
		key := queueKey(&s)
		n := l.counts.m[e.client]
		if n == nil || n.key != key || n.from.Less(floor) {
			// New, changed, or the log was truncated above where it was
			// counted from: count it from the start.
			start := s.Checkpoint.Of(l.Part)
			if start.Less(floor) {
				start = floor
			}
			n = &queueCount{key: key, from: start, upTo: start}
			l.counts.m[e.client] = n
		}
		batch = append(batch, &queued{client: e.client, subs: s.Subs, n: n, part: l.Part})
	}
	return batch, next, nil
}

// countQueues brings the counts of batch up to head, by one read of the
// log from the lowest point any of them was counted to. Each message is
// matched once, through an index of the batch's subscriptions, so the
// read costs what the messages and their matches cost, not the messages
// times the sessions.
func (l *Limiter) countQueues(ctx context.Context, batch []*queued, head table.Cursor, lim queueLimits) error {
	var idx topic.Index
	byClient := make(map[string]*queued, len(batch))
	for _, e := range batch {
		byClient[e.client] = e
		for _, r := range e.subs {
			if r.Group == "" && r.QoS > 0 {
				idx.Add(topic.Subscription{Client: e.client, Filter: r.Filter, QoS: r.QoS})
			}
		}
	}
	// Sessions start counting in the order of where they were counted
	// to; seen counts the messages read, start what it was when each
	// started.
	order := slices.Clone(batch)
	slices.SortFunc(order, func(x, y *queued) int {
		switch {
		case x.n.upTo.Less(y.n.upTo):
			return -1
		case y.n.upTo.Less(x.n.upTo):
			return 1
		}
		return 0
	})
	type mark struct {
		n     int
		bytes int64
	}
	start := make(map[*queued]mark, len(order))
	seen, next := 0, 0
	var seenBytes int64
	var at uint64 // the message being read, for the one count per session
	err := l.scanMessages(ctx, order[0].n.upTo, head, func(ev table.Event) bool {
		for next < len(order) && !order[next].n.upTo.Covers(ev.Key, ev.Index) {
			start[order[next]] = mark{seen, seenBytes}
			next++
		}
		size := lim.size(ev)
		seen++
		seenBytes += size
		at++
		idx.Match(ev.ID, func(sub topic.Subscription) {
			e := byClient[sub.Client]
			if e == nil || e.at == at || e.n.upTo.Covers(ev.Key, ev.Index) {
				return
			}
			e.at = at
			if n := e.n; e.owns(ev) {
				if n.own == 0 {
					st := start[e]
					n.first = cursorBefore(ev)
					n.before = n.total + seen - 1 - st.n
					n.beforeBytes = n.totalBytes + seenBytes - size - st.bytes
				}
				n.own++
				n.ownBytes += size
			}
		})
		return true
	})
	if err != nil {
		// Counted part of the way: count them again next pass.
		for _, e := range batch {
			delete(l.counts.m, e.client)
		}
		return err
	}
	for _, e := range order {
		if st, ok := start[e]; ok {
			e.n.total += seen - st.n
			e.n.totalBytes += seenBytes - st.bytes
		}
		if e.n.upTo.Less(head) {
			e.n.upTo = head
		}
	}
	return nil
}

// advanceQueue moves the checkpoint of e, a session with more than lim
// of the log behind it: over its oldest own messages past lim, or else
// up to its oldest own message (see above).
func (l *Limiter) advanceQueue(ctx context.Context, e *queued, head table.Cursor, lim queueLimits, cuts *queueCuts) error {
	n := e.n
	if !lim.past(n.own, n.ownBytes) {
		// What lies before its oldest message holds none of its own.
		to, skipped, skippedBytes := head, n.total, n.totalBytes
		if n.own > 0 {
			to, skipped, skippedBytes = n.first, n.before, n.beforeBytes
		}
		if !n.from.Less(to) {
			return nil
		}
		key, err := l.moveCheckpoint(ctx, e.client, n.key, to, 0, 0)
		if err != nil || key == "" {
			delete(l.counts.m, e.client)
			return err
		}
		n.key, n.from = key, to
		n.total -= skipped
		n.totalBytes -= skippedBytes
		n.before, n.beforeBytes = 0, 0
		return nil
	}
	// Find the oldest message it keeps: the first own one from which the
	// rest fit the limits. When none does, it keeps nothing and moves to
	// where it was counted to.
	own, ownBytes := n.own, n.ownBytes
	skipped, skippedBytes := 0, int64(0)
	to, found := n.upTo, false
	err := l.scanMessages(ctx, n.from, n.upTo, func(ev table.Event) bool {
		size := lim.size(ev)
		if e.owns(ev) {
			if !lim.past(own, ownBytes) {
				to, found = cursorBefore(ev), true
				return false
			}
			own--
			ownBytes -= size
		}
		skipped++
		skippedBytes += size
		return true
	})
	if err != nil {
		return err
	}
	if !found && own != 0 {
		delete(l.counts.m, e.client) // the log changed under the count: count again
		return nil
	}
	drop := n.own - own
	// What the message count alone would have dropped is the count
	// limit's; the rest the byte limit's.
	byBytes := drop
	if lim.msgs > 0 {
		byBytes = drop - max(0, n.own-lim.msgs)
	}
	key, err := l.moveCheckpoint(ctx, e.client, n.key, to, drop, byBytes)
	if err != nil || key == "" {
		delete(l.counts.m, e.client)
		return err
	}
	cuts.sessions++
	cuts.dropped += drop
	l.Log.Debug("session over the queued-message limit lost its oldest messages",
		"client", e.client, "dropped", drop, "checkpoint", to.String())
	n.key, n.from = key, to
	n.own, n.ownBytes = own, ownBytes
	n.total, n.totalBytes = n.total-skipped, n.totalBytes-skippedBytes
	n.first, n.before, n.beforeBytes = to, 0, 0
	return nil
}

// moveCheckpoint writes cp as the persisted checkpoint of client, an
// offline session whose record still has the checkpoint and
// subscriptions key stands for, and returns the queueKey of the record
// written; "" when it has not or the client connected meanwhile. The
// write is conditional on the version read, and a connection of the
// client on this node waits for it (see BeginCut). dropped of the
// session's messages it passes over are counted before that connection
// goes on, byBytes of them as the byte limit's too.
func (l *Limiter) moveCheckpoint(ctx context.Context, client, key string, cp table.Cursor, dropped, byBytes int) (string, error) {
	end, ok := l.BeginCut(client)
	if !ok {
		return "", nil
	}
	defer end()
	r, err := l.DB.Get(ctx, session.Table, client)
	if errors.Is(err, table.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var s session.Record
	if session.Decode(r.Value, &s) != nil || s.Online || s.Will != nil || queueKey(&s) != key {
		return "", nil
	}
	s.Loaded()
	s.Checkpoint.Set(l.Part, cp)
	for i, sub := range s.Subs {
		if sub.Since != nil && !s.Checkpoint.Below(*sub.Since) {
			s.Subs[i].Since = nil // the checkpoint passed it
		}
	}
	q1 := s.Q1[:0]
	for _, slot := range s.Q1 {
		if !s.Checkpoint.Covers(slot.Pos) {
			q1 = append(q1, slot)
		}
	}
	s.Q1 = q1
	tx := l.DB.Begin()
	if err := tx.ExpectVersion(session.Table, client, r.Version); err != nil {
		return "", err
	}
	if err := session.Put(tx, client, &s); err != nil {
		return "", err
	}
	if l.BeforeCut != nil {
		l.BeforeCut(client)
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, engine.ErrConflict) {
			return "", nil // written meanwhile: the next pass looks again
		}
		return "", err
	}
	l.Counters.DroppedRetention.Add(uint64(dropped))
	l.Counters.LimitQueuedBytes.Add(uint64(byBytes))
	return queueKey(&s), nil
}
