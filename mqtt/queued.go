package mqtt

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// The per-session queue limit (Options.MaxQueuedMessages), enforced by
// retention passes on offline sessions.
//
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
// dropped with reason "retention" (one per message) and logged. An
// offline session further behind than the limit in log messages but
// within it in its own moves, losing nothing, to just before its oldest
// own message (or to the head when it has none), so it holds the log
// from there only. Either way the log below it can go.
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
// subscriptions; the counts are kept in memory between passes
// (queueCount), so a pass reads only what was appended since, and dropped
// for sessions the pass did not reach (gone, online, or no longer
// behind). A pass still reads the record of every offline session it
// reaches, to see that its checkpoint and subscriptions are those
// counted.
//
// Races. A move writes the session record conditional on the version it
// read, so it never replaces a record the session (or anything else)
// wrote meanwhile. A connection of the same client id on this node waits
// for a move under way before it reads the session (awaitQueueCut), and a
// move does not start while one is registered, so a resume never starts
// from the checkpoint a move is replacing. A connection on another node
// sharing the store may still read the record just before a move and
// write it back: it then resumes from the checkpoint it read or, when
// the log was truncated up to the move meanwhile, from the oldest message
// retained, as after any truncation above a checkpoint (counted as
// dropped there once more).

// queueBatch is how many sessions one log read of a pass counts.
const queueBatch = 1024

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
	// > 0).
	own, total, before int
	first              table.Cursor
}

// queueCounts holds the counts between passes; mu also keeps passes of
// the limit one at a time.
type queueCounts struct {
	mu   sync.Mutex
	m    map[string]*queueCount
	tail tailCount
}

// tailCount counts the messages of the log from where the first pass
// found its head, marking a position every so many, so that a pass knows
// above which position the log holds no more than the limit of messages
// without reading it again.
type tailCount struct {
	upTo  table.Cursor
	count int
	marks []tailMark // ascending; the first is the start, at count 0
}

// tailMark is a position of the log and the count of messages up to it.
type tailMark struct {
	pos table.Cursor
	n   int
}

// threshold brings t up to head and returns the lowest position it knows
// of above which the log holds no more than limit messages: no session
// at or above it can be over the limit.
func (t *tailCount) threshold(ctx context.Context, b *Broker, head, floor table.Cursor, limit int) (table.Cursor, error) {
	if t.marks == nil {
		t.upTo, t.marks = head, []tailMark{{pos: head}}
		return head, nil
	}
	from := t.upTo
	if from.Less(floor) {
		from = floor
	}
	step := max(1, limit/64)
	err := b.scanMessages(ctx, from, head, func(ev table.Event) bool {
		t.count++
		t.upTo = ev.Cursor()
		if t.count%step == 0 {
			t.marks = append(t.marks, tailMark{pos: t.upTo, n: t.count})
		}
		// A mark more than limit messages back is never the answer
		// again: the count only grows. About 64 are kept.
		for len(t.marks) > 1 && t.count-t.marks[0].n > limit {
			t.marks = t.marks[1:]
		}
		return true
	})
	if err != nil {
		return head, err
	}
	t.upTo = head
	if t.count-t.marks[0].n > limit {
		return head, nil
	}
	return t.marks[0].pos, nil
}

// queued is a session a pass considers.
type queued struct {
	client string
	subs   []subRecord
	n      *queueCount
	at     uint64 // the last message countQueues counted it for
}

// queueKey identifies what a count depends on: the checkpoint and every
// subscription field that matching reads.
func queueKey(s *sessionRecord) string {
	var b strings.Builder
	b.WriteString(s.Checkpoint.String())
	for _, r := range s.Subs {
		b.WriteString(slotSep + r.Filter + slotSep + r.Group + slotSep)
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
	var m *Message
	pos := ev.Cursor()
	for _, s := range q.subs {
		if s.Group != "" || s.QoS == 0 || !topic.Match(s.Filter, ev.ID) {
			continue
		}
		if s.Since != nil && !s.Since.Less(pos) {
			continue // published before the subscription was made
		}
		if s.NL {
			if m == nil {
				m = new(Message)
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
func (b *Broker) scanMessages(ctx context.Context, from, upTo table.Cursor, fn func(table.Event) bool) error {
	if !from.Less(upTo) {
		return nil
	}
	_, err := b.db.Follow(ctx, table.SubscribeOptions{Table: tableMsgs, Start: from, IncludeSuperseded: true, Composite: true,
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

// limitQueues enforces Options.MaxQueuedMessages on the offline sessions
// behind head (see above).
func (b *Broker) limitQueues(ctx context.Context, head table.Cursor) error {
	limit := b.opts.MaxQueuedMessages
	q := &b.queues
	q.mu.Lock()
	defer q.mu.Unlock()
	st, err := b.db.LogStats(ctx)
	if err != nil {
		return err
	}
	if st.Entries <= uint64(limit) {
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
	stop, err := q.tail.threshold(ctx, b, head, floor, limit)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var cuts queueCuts
	defer func() {
		if cuts.sessions > 0 {
			b.log.Warn("sessions over the queued-message limit lost their oldest messages",
				"sessions", cuts.sessions, "dropped", cuts.dropped, "limit", limit)
		}
	}()
	from := ""
	for from != "\xff" {
		var batch []*queued
		batch, from, err = b.queueBatch(ctx, from, stop, floor, seen)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			continue
		}
		if err := b.countQueues(ctx, batch, head); err != nil {
			return err
		}
		done := false
		for _, e := range batch {
			if e.n.total <= limit {
				done = true // every session above has fewer behind it
				continue
			}
			if err := b.advanceQueue(ctx, e, head, limit, &cuts); err != nil {
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
func (b *Broker) queueBatch(ctx context.Context, from string, stop, floor table.Cursor, seen map[string]bool) ([]*queued, string, error) {
	type entry struct {
		client string
		cp     table.Cursor
	}
	var entries []entry
	next := "\xff"
	err := b.db.RangeFrom(ctx, tableCheckpoints, from, func(r table.Record) bool {
		cp, client, ok := parseCheckpointID(r.ID)
		if !ok || !cp.Less(stop) {
			return false
		}
		if len(entries) == queueBatch {
			next = r.ID
			return false
		}
		// An online session is passed over; one idle since its checkpoint
		// was written is asked to write it again (see liveCheckpoint), so
		// its entry moves up out of the way of the next passes.
		if _, on := b.onlineCheckpoint(client, cp); !on && !seen[client] {
			entries = append(entries, entry{client, cp})
		}
		return true
	})
	if err != nil {
		return nil, "", err
	}
	var batch []*queued
	for _, e := range entries {
		r, err := b.db.Get(ctx, tableSessions, e.client)
		if errors.Is(err, table.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		var s sessionRecord
		if decodeSession(r.Value, &s) != nil || s.Online || s.Will != nil || s.Checkpoint != e.cp {
			continue
		}
		seen[e.client] = true
		key := queueKey(&s)
		n := b.queues.m[e.client]
		if n == nil || n.key != key || n.from.Less(floor) {
			// New, changed, or the log was truncated above where it was
			// counted from: count it from the start.
			start := s.Checkpoint
			if start.Less(floor) {
				start = floor
			}
			n = &queueCount{key: key, from: start, upTo: start}
			b.queues.m[e.client] = n
		}
		batch = append(batch, &queued{client: e.client, subs: s.Subs, n: n})
	}
	return batch, next, nil
}

// countQueues brings the counts of batch up to head, by one read of the
// log from the lowest point any of them was counted to. Each message is
// matched once, through an index of the batch's subscriptions, so the
// read costs what the messages and their matches cost, not the messages
// times the sessions.
func (b *Broker) countQueues(ctx context.Context, batch []*queued, head table.Cursor) error {
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
	start := make(map[*queued]int, len(order))
	seen, next := 0, 0
	var at uint64 // the message being read, for the one count per session
	err := b.scanMessages(ctx, order[0].n.upTo, head, func(ev table.Event) bool {
		for next < len(order) && !order[next].n.upTo.Covers(ev.Key, ev.Index) {
			start[order[next]] = seen
			next++
		}
		seen++
		at++
		idx.Match(ev.ID, func(sub topic.Subscription) {
			e := byClient[sub.Client]
			if e == nil || e.at == at || e.n.upTo.Covers(ev.Key, ev.Index) {
				return
			}
			e.at = at
			if n := e.n; e.owns(ev) {
				if n.own == 0 {
					n.first, n.before = cursorBefore(ev), n.total+seen-1-start[e]
				}
				n.own++
			}
		})
		return true
	})
	if err != nil {
		// Counted part of the way: count them again next pass.
		for _, e := range batch {
			delete(b.queues.m, e.client)
		}
		return err
	}
	for _, e := range order {
		if st, ok := start[e]; ok {
			e.n.total += seen - st
		}
		if e.n.upTo.Less(head) {
			e.n.upTo = head
		}
	}
	return nil
}

// advanceQueue moves the checkpoint of e, a session with more than limit
// messages of the log behind it: over its oldest own messages past the
// limit, or else up to its oldest own message (see above).
func (b *Broker) advanceQueue(ctx context.Context, e *queued, head table.Cursor, limit int, cuts *queueCuts) error {
	n := e.n
	if n.own <= limit {
		// What lies before its oldest message holds none of its own.
		to, skipped := head, n.total
		if n.own > 0 {
			to, skipped = n.first, n.before
		}
		if !n.from.Less(to) {
			return nil
		}
		key, err := b.moveCheckpoint(ctx, e.client, n.key, to, 0)
		if err != nil || key == "" {
			delete(b.queues.m, e.client)
			return err
		}
		n.key, n.from = key, to
		n.total -= skipped
		n.before = 0
		return nil
	}
	// Find the oldest message it keeps: the one after the drop-th.
	drop, dropped, skipped := n.own-limit, 0, 0
	var keep table.Event
	found := false
	err := b.scanMessages(ctx, n.from, n.upTo, func(ev table.Event) bool {
		if e.owns(ev) {
			if dropped == drop {
				keep, found = ev, true
				return false
			}
			dropped++
		}
		skipped++
		return true
	})
	if err != nil {
		return err
	}
	if !found {
		delete(b.queues.m, e.client) // the log changed under the count: count again
		return nil
	}
	to := cursorBefore(keep)
	key, err := b.moveCheckpoint(ctx, e.client, n.key, to, drop)
	if err != nil || key == "" {
		delete(b.queues.m, e.client)
		return err
	}
	cuts.sessions++
	cuts.dropped += drop
	b.log.Debug("session over the queued-message limit lost its oldest messages",
		"client", e.client, "dropped", drop, "checkpoint", to.String())
	n.key, n.from = key, to
	n.own, n.total = limit, n.total-skipped
	n.first, n.before = to, 0
	return nil
}

// moveCheckpoint writes cp as the persisted checkpoint of client, an
// offline session whose record still has the checkpoint and
// subscriptions key stands for, and returns the queueKey of the record
// written; "" when it has not or the client connected meanwhile. The
// write is conditional on the version read, and a connection of the
// client on this node waits for it (see awaitQueueCut). dropped of the
// session's messages it passes over are counted before that connection
// goes on.
func (b *Broker) moveCheckpoint(ctx context.Context, client, key string, cp table.Cursor, dropped int) (string, error) {
	b.mu.Lock()
	if _, on := b.conns[client]; on {
		b.mu.Unlock()
		return "", nil
	}
	if b.cutting == nil {
		b.cutting = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	b.cutting[client] = done
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.cutting, client)
		b.mu.Unlock()
		close(done)
	}()
	r, err := b.db.Get(ctx, tableSessions, client)
	if errors.Is(err, table.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var s sessionRecord
	if decodeSession(r.Value, &s) != nil || s.Online || s.Will != nil || queueKey(&s) != key {
		return "", nil
	}
	s.loaded()
	s.Checkpoint = cp
	for i, sub := range s.Subs {
		if sub.Since != nil && !cp.Less(*sub.Since) {
			s.Subs[i].Since = nil // the checkpoint passed it
		}
	}
	q1 := s.Q1[:0]
	for _, slot := range s.Q1 {
		if cp.Less(slot.Pos) {
			q1 = append(q1, slot)
		}
	}
	s.Q1 = q1
	tx := b.db.Begin()
	if err := tx.ExpectVersion(tableSessions, client, r.Version); err != nil {
		return "", err
	}
	if err := putSession(tx, client, &s); err != nil {
		return "", err
	}
	b.beforeSubmit(KindQueueCut, client)
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, engine.ErrConflict) {
			return "", nil // written meanwhile: the next pass looks again
		}
		return "", err
	}
	b.metrics.droppedRetention.Add(uint64(dropped))
	return queueKey(&s), nil
}

// awaitQueueCut waits until no retention move of client's checkpoint is
// under way. A connection calls it once registered, before it reads its
// session: a move that has not started by then does not start.
func (b *Broker) awaitQueueCut(ctx context.Context, client string) {
	b.mu.Lock()
	done := b.cutting[client]
	b.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}
