package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Replay on subscribe (see docs/replay.md). A subscription that asks for
// history gets its own reader over the message log from the requested
// position, filtered by its topic filter. While that reader runs, the
// session's live deliveries for the filter are held back (the sender
// passes over them, noting the highest one); once the reader has covered
// the log up to where the subscription joined the live route and past
// every message held back, the filter's since position moves to where
// the reader stopped and live delivery takes over. The replay therefore
// ends exactly where live delivery starts: no gap, no duplicate.
//
// The replay's acknowledged checkpoint bounds the session's persisted
// checkpoint, and the filter's persisted since position is the replay's
// checkpoint, so a broker restart or reconnect in the middle of a replay
// resumes it through the session's ordinary catch-up, from the first
// message the client did not acknowledge.

const (
	// PropReplayFrom is the user property of a 5.0 SUBSCRIBE asking its
	// subscriptions to replay the message log from a point: an RFC 3339
	// time, a negative duration such as "-15m", or a position a delivery
	// carried in PropPosition (exclusive: replay starts after it).
	PropReplayFrom = "tidemark-replay-from"
	// PropPosition is the user property carrying a delivered message's
	// log position, on every message a replaying subscription receives
	// (5.0), replayed or live. Passed back in PropReplayFrom, it resumes
	// right after that message.
	PropPosition = "tidemark-position"
	// PropOldestPosition is the user property of a SUBACK refusing a
	// replay older than the retained log: replaying from it delivers
	// every message still retained.
	PropOldestPosition = "tidemark-oldest-position"
	// ReplayPrefix is the topic-filter prefix asking for a replay where
	// there are no user properties (3.1.1): "$replay/<from>/<filter>".
	ReplayPrefix = "$replay/"
)

// ErrReplayFrom reports a replay start that cannot be parsed.
var ErrReplayFrom = errors.New("mqtt: bad replay start")

// ErrReplayTruncated reports a replay start older than the retained log.
var ErrReplayTruncated = errors.New("mqtt: replay start older than the retained log")

// replayProbeEvery is how often an idle replay reader reports how far it
// has read, so the switch to live delivery happens without a new message.
const replayProbeEvery = 5 * time.Millisecond

// replayStart is where a replay begins: after a log position, and from
// messages written at or after a time (zero: any).
type replayStart struct {
	after table.Cursor
	since time.Time
}

// parseReplayFrom parses the value of PropReplayFrom or of the <from>
// level of ReplayPrefix, relative to now.
func parseReplayFrom(s string, now time.Time) (replayStart, error) {
	switch {
	case s == "":
		return replayStart{}, fmt.Errorf("%w: empty: use an RFC 3339 time, a negative duration such as -15m, or a %s value", ErrReplayFrom, PropPosition)
	case s[0] == '-':
		d, err := time.ParseDuration(s)
		if err != nil || d >= 0 {
			return replayStart{}, fmt.Errorf("%w: %q is not a negative duration (such as -15m or -2h30m)", ErrReplayFrom, s)
		}
		return replayStart{since: now.Add(d)}, nil
	case s[0] >= '0' && s[0] <= '9' && !strings.ContainsAny(s, "-:T"):
		var c table.Cursor
		if err := c.UnmarshalText([]byte(s)); err != nil {
			return replayStart{}, fmt.Errorf("%w: %q is not a %s value: %w", ErrReplayFrom, s, PropPosition, err)
		}
		return replayStart{after: c}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return replayStart{}, fmt.Errorf("%w: %q: use an RFC 3339 time (2026-01-02T15:04:05Z), a negative duration such as -15m, or a %s value", ErrReplayFrom, s, PropPosition)
	}
	return replayStart{since: t}, nil
}

// cutReplayPrefix splits "$replay/<from>/<filter>"; ok is false when
// filter has no such prefix.
func cutReplayPrefix(filter string) (from, inner string, ok bool, err error) {
	rest, ok := strings.CutPrefix(filter, ReplayPrefix)
	if !ok {
		return "", filter, false, nil
	}
	from, inner, found := strings.Cut(rest, "/")
	if !found || inner == "" {
		return "", "", true, fmt.Errorf("%w: %q: use %s<from>/<filter>, for example %s-15m/sensors/#", ErrReplayFrom, filter, ReplayPrefix, ReplayPrefix)
	}
	return from, inner, true, nil
}

// truncatedError is a replay start the retained log no longer reaches,
// with the oldest position it does.
type truncatedError struct {
	asked  string
	oldest table.Cursor
}

func (e *truncatedError) Error() string {
	return fmt.Sprintf("%s: %s is older than the retained log; the oldest available position is %s (replay from it, or configure a longer history)",
		ErrReplayTruncated, e.asked, e.oldest)
}

func (e *truncatedError) Unwrap() error { return ErrReplayTruncated }

// errFound stops a scan at the first event.
var errFound = errors.New("found")

// resolveReplay checks a replay start against retention: it fails with a
// *truncatedError when messages it asks for may have been removed.
func (b *Broker) resolveReplay(ctx context.Context, asked string, rs replayStart) error {
	st, err := b.db.LogStats(ctx)
	if err != nil {
		return err
	}
	if st.Floor == 0 {
		return nil // nothing was ever removed
	}
	oldest := table.Cursor{Key: st.Floor - 1}
	if rs.since.IsZero() {
		if rs.after.Less(oldest) {
			return &truncatedError{asked: asked, oldest: oldest}
		}
		return nil
	}
	// A time start reaches back far enough if the oldest retained message
	// is no newer than it: whatever was removed was older still.
	var first table.Event
	found := false
	_, err = b.db.Follow(ctx, table.SubscribeOptions{Table: tableMsgs, Start: oldest, IncludeSuperseded: true,
		Hooks: table.Hooks{Live: func() bool { return false }}}, func(ev table.Event) error {
		first, found = ev, true
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return err
	}
	if !found || rs.since.Before(first.Version.Time()) {
		return &truncatedError{asked: asked, oldest: oldest}
	}
	return nil
}

// replay is one subscription's read of the message log's history.
type replay struct {
	filter string
	sub    *table.Subscription
	stop   chan struct{}
	ending sync.Once

	// Guarded by outbound.mu:
	active   bool         // live deliveries for filter are held back
	until    table.Cursor // the router's frontier once the subscription was in the index
	held     table.Cursor // the highest live delivery held back
	last     table.Cursor // just past the last replayed delivery
	at       table.Cursor // where live delivery took over (after the handover)
	inflight int          // replayed deliveries not yet acknowledged
}

// replayItem is what a replay's forwarder hands the sender: an event, a
// probe saying the reader handled everything up to at, or the end.
type replayItem struct {
	rp    *replay
	ev    table.Event
	probe bool
	at    table.Cursor
	err   error
	end   bool
}

// startReplay opens the reader of a replay from rs for filter. The
// subscription is not yet the session's: see addReplayLocked.
func (o *outbound) startReplay(filter string, rs replayStart) (*replay, error) {
	since := rs.since
	sub, err := o.c.b.db.Subscribe(o.c.ctx, table.SubscribeOptions{
		Table: tableMsgs, Start: rs.after, IncludeSuperseded: true, Composite: true, Buffer: 64,
		Filter: func(ev table.Event) bool {
			return topic.Match(filter, ev.ID) && (since.IsZero() || !ev.Version.Time().Before(since))
		},
	})
	if err != nil {
		return nil, err
	}
	return &replay{filter: filter, sub: sub, stop: make(chan struct{}), active: true}, nil
}

// addReplayLocked makes rp the replay of its filter, ending one running
// already; o.mu held.
func (o *outbound) addReplayLocked(rp *replay) {
	if o.replays == nil {
		o.replays = map[string]*replay{}
	}
	if old := o.replays[rp.filter]; old != nil {
		old.end()
	}
	o.replays[rp.filter] = rp
	// Held back, not passed over: a live delivery the session takes
	// before the handover must be one the replay covers (see handover).
	o.since.del(rp.filter)
	if o.posFilters == nil {
		o.posFilters = map[string]bool{}
	}
	o.posFilters[rp.filter] = true
}

// runReplay sets where rp must read to and starts its forwarder.
func (o *outbound) runReplay(rp *replay, until table.Cursor) {
	o.mu.Lock()
	rp.until = until
	if o.replayCh == nil {
		o.replayCh = make(chan replayItem, 16) // with the session's first replay
	}
	ch := o.replayCh
	o.mu.Unlock()
	go rp.forward(o.c.ctx, ch, o.wake)
}

// end stops the replay's reader and forwarder; safe to call twice, from
// any goroutine.
func (rp *replay) end() {
	rp.ending.Do(func() {
		close(rp.stop)
		go func() { _ = rp.sub.Close() }()
	})
}

// forward hands the reader's events to the sender in order, waking it
// for each, and while the reader has nothing new, probes: everything its
// handled frontier covers was handed over before the probe.
func (rp *replay) forward(ctx context.Context, ch chan<- replayItem, wake func()) {
	send := func(it replayItem) bool {
		select {
		case ch <- it:
			wake()
			return true
		case <-rp.stop:
		case <-ctx.Done():
		}
		// Never delivered: it stays unacknowledged, so the replay's
		// checkpoint stays before it.
		return false
	}
	// An idle reader probes less and less often (up to 64 x
	// replayProbeEvery): a replay waiting for the log's next message to
	// reach where it hands over costs next to nothing meanwhile.
	every := replayProbeEvery
	t := time.NewTimer(every)
	defer t.Stop()
	events := rp.sub.Events()
	var probed table.Cursor
	// pass hands over one receive from events; false ends the forwarder.
	pass := func(ev table.Event, ok bool) bool {
		if !ok {
			send(replayItem{rp: rp, end: true, err: rp.sub.Err()})
			return false
		}
		return send(replayItem{rp: rp, ev: ev})
	}
	for {
		select {
		case ev, ok := <-events:
			if !pass(ev, ok) {
				return
			}
			every = replayProbeEvery
			continue
		case <-t.C:
		case <-rp.stop:
			return
		case <-ctx.Done():
			return
		}
		at := rp.sub.Cursor()
		if at == probed {
			every = min(2*every, 64*replayProbeEvery)
		}
		probed = at
		t.Reset(every)
		for drained := false; !drained; {
			select {
			case ev, ok := <-events:
				if !pass(ev, ok) {
					return
				}
			default:
				drained = true
			}
		}
		if !send(replayItem{rp: rp, probe: true, at: at}) {
			return
		}
	}
}

// heldLocked reports whether live deliveries for filter are held back
// by a running replay, noting pos as held; o.mu held.
func (o *outbound) heldLocked(filter string, pos table.Cursor) bool {
	rp := o.replays[filter]
	if rp == nil || !rp.active {
		return false
	}
	if rp.held.Less(pos) {
		rp.held = pos
	}
	return true
}

// handleReplay handles what a forwarder handed over. Sender only.
func (o *outbound) handleReplay(it replayItem) {
	rp := it.rp
	o.mu.Lock()
	current := o.replays[rp.filter] == rp && rp.active
	o.mu.Unlock()
	if !current {
		return // past the handover, or ended: live delivery has it
	}
	switch {
	case it.end:
		c := o.c
		if errors.Is(it.err, table.ErrHistoryUnavailable) {
			c.log.Warn("replay: retention removed history before it was replayed", "filter", rp.filter, "err", it.err)
			c.disconnect(0x83, "replay of "+rp.filter+": retention removed history before it was replayed")
			return
		}
		if it.err != nil && c.ctx.Err() == nil {
			c.log.Warn("replay ended", "filter", rp.filter, "err", it.err)
			c.disconnect(0x80, "replay of "+rp.filter+" failed")
		}
	case it.probe:
		o.handover(rp, it.at)
	default:
		o.deliverReplayed(rp, it.ev)
	}
}

// handover ends rp's replay once it has read everything up to at and at
// covers where the subscription joined the route and every live delivery
// held back: live delivery takes over right after it.
func (o *outbound) handover(rp *replay, at table.Cursor) {
	o.mu.Lock()
	if at.Less(rp.until) || at.Less(rp.held) {
		o.mu.Unlock()
		return
	}
	if at.Less(rp.last) {
		at = rp.last
	}
	o.since.set(rp.filter, at)
	rp.active, rp.at = false, at
	o.mu.Unlock()
	rp.end()
	o.c.log.Debug("replay caught up; live delivery continues", "filter", rp.filter, "at", at)
}

// deliverReplayed sends one replayed message, at most at QoS 1.
func (o *outbound) deliverReplayed(rp *replay, ev table.Event) {
	c := o.c
	if c.ctx.Err() != nil {
		// Closing: left unacknowledged, so the replay's checkpoint stays
		// before it (an access check would fail now and pass it over).
		return
	}
	var m Message
	if err := m.DecodeEvent(ev.Value, ev.ID); err != nil {
		_ = rp.sub.Ack(ev)
		return
	}
	o.mu.Lock()
	var s *topic.Subscription
	for i := range o.subs {
		if o.subs[i].Group == "" && o.subs[i].Filter == rp.filter {
			s = &o.subs[i]
		}
	}
	if s == nil {
		o.mu.Unlock()
		_ = rp.sub.Ack(ev)
		return
	}
	sub := *s
	rp.last = ev.Cursor()
	o.mu.Unlock()
	if (sub.NoLocal && m.From == c.client) || m.Expired(time.Now()) || !c.b.allow(c.ctx, c.id, AccessRead, m.Topic) {
		_ = rp.sub.Ack(ev)
		return
	}
	if !o.waitWindow() {
		return // closing: unacknowledged, it is replayed on resume
	}
	var ids []uint32
	if sub.ID != 0 {
		ids = []uint32{sub.ID}
	}
	m.UserProps = append(m.UserProps, UserProperty{Key: PropPosition, Value: ev.Cursor().String()})
	c.b.metrics.MsgsReplayed.Add(1)
	qos := min(sub.QoS, m.QoS, 1)
	if qos > 0 {
		o.mu.Lock()
		rp.inflight++
		o.mu.Unlock()
	}
	o.send(delivery{msg: &m, qos: qos, ids: ids, retain: m.Retain && sub.RetainAsPublished, ev: ev, hasEv: true, rp: rp})
}

// replayDone notes that a replayed delivery completed; a replay that
// handed over and has nothing in flight is forgotten.
func (o *outbound) replayDone(rp *replay) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rp.inflight--
	if !rp.active && rp.inflight <= 0 && o.replays[rp.filter] == rp {
		delete(o.replays, rp.filter)
	}
}

// dropReplayLocked ends and forgets the replay of filter; o.mu held.
func (o *outbound) dropReplayLocked(filter string) {
	if rp := o.replays[filter]; rp != nil {
		rp.end()
		delete(o.replays, filter)
	}
	delete(o.posFilters, filter)
}

// endReplays stops every replay's reader (on teardown): their
// checkpoints stay readable for the final persist.
func (o *outbound) endReplays() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rp := range o.replays {
		rp.end()
	}
}

// lowCheckpointLocked returns the lowest of cp and the acknowledged
// checkpoints of the replays still running or with deliveries in
// flight; o.mu held.
func (o *outbound) lowCheckpointLocked(cp table.Cursor) table.Cursor {
	for _, rp := range o.replays {
		if !rp.active && rp.inflight <= 0 {
			continue
		}
		if rcp := rp.checkpointLocked(); rcp.Less(cp) {
			cp = rcp
		}
	}
	return cp
}

// checkpointLocked returns the replay's acknowledged checkpoint, never
// past where live delivery took over: what the replay left unread after
// it is live delivery's; outbound.mu held.
func (rp *replay) checkpointLocked() table.Cursor {
	cp := rp.sub.Checkpoint()
	if !rp.active && rp.at.Less(cp) {
		cp = rp.at
	}
	return cp
}

// checkpointNow returns the checkpoint a crash now would resume from: the
// session member's, or lower while a replay is behind it.
func (o *outbound) checkpointNow() (table.Cursor, bool) {
	sub := o.currentSub()
	if sub == nil {
		return table.Cursor{}, false
	}
	cp := sub.Checkpoint()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lowCheckpointLocked(cp), true
}
