package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// PropPosition is the user property carrying a delivered message's log
// position (see the broker's PropPosition).
const PropPosition = "tidemark-position"

// replayProbeEvery is how often an idle replay reader reports how far it
// has read, so the switch to live delivery happens without a new message.
const replayProbeEvery = 5 * time.Millisecond

// Replay is one subscription's read of the message log's history.
type Replay struct {
	filter string
	sub    *table.Subscription
	stop   chan struct{}
	ending sync.Once

	// Guarded by Session.mu:
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
	rp    *Replay
	ev    table.Event
	probe bool
	at    table.Cursor
	err   error
	end   bool
}

// StartReplay opens the reader of a replay for filter, of the messages
// after the log position after and (unless since is zero) written at or
// after since. The subscription is not yet the session's: AddSubscriptions
// makes it so, and RunReplay starts it once the SUBACK is on its way.
func (o *Session) StartReplay(filter string, after table.Cursor, since time.Time) (*Replay, error) {
	sub, err := o.env.Parts.DB(0).Subscribe(o.ctx, table.SubscribeOptions{
		Table: message.LogTable, Start: after, IncludeSuperseded: true, Composite: true, Buffer: 64,
		Filter: func(ev table.Event) bool {
			// QoS 0 messages (in the log where nodes share the store)
			// are at most once: never replayed.
			if qos, ok := message.StoredQoS(ev.Value); ok && qos == 0 {
				return false
			}
			return topic.Match(filter, ev.ID) && (since.IsZero() || !ev.Version.Time().Before(since))
		},
	})
	if err != nil {
		return nil, err
	}
	return &Replay{filter: filter, sub: sub, stop: make(chan struct{}), active: true}, nil
}

// addReplayLocked makes rp the replay of its filter, ending one running
// already; o.mu held.
func (o *Session) addReplayLocked(rp *Replay) {
	if o.replays == nil {
		o.replays = map[string]*Replay{}
	}
	if old := o.replays[rp.filter]; old != nil {
		old.End()
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

// RunReplay sets where rp must read to and starts its forwarder.
func (o *Session) RunReplay(rp *Replay, until table.Cursor) {
	o.mu.Lock()
	rp.until = until
	if o.replayCh == nil {
		o.replayCh = make(chan replayItem, 16) // with the session's first replay
	}
	ch := o.replayCh
	o.mu.Unlock()
	go rp.forward(o.ctx, ch, o.wake)
}

// End stops the replay's reader and forwarder; safe to call twice, from
// any goroutine.
func (rp *Replay) End() {
	rp.ending.Do(func() {
		close(rp.stop)
		go func() { _ = rp.sub.Close() }()
	})
}

// forward hands the reader's events to the sender in order, waking it
// for each, and while the reader has nothing new, probes: everything its
// handled frontier covers was handed over before the probe.
func (rp *Replay) forward(ctx context.Context, ch chan<- replayItem, wake func()) {
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
func (o *Session) heldLocked(filter string, pos table.Cursor) bool {
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
func (o *Session) handleReplay(it replayItem) {
	rp := it.rp
	o.mu.Lock()
	current := o.replays[rp.filter] == rp && rp.active
	o.mu.Unlock()
	if !current {
		return // past the handover, or ended: live delivery has it
	}
	switch {
	case it.end:
		if errors.Is(it.err, table.ErrHistoryUnavailable) {
			o.log.Warn("replay: retention removed history before it was replayed", "filter", rp.filter, "err", it.err)
			o.conn.Disconnect(0x83, "replay of "+rp.filter+": retention removed history before it was replayed")
			return
		}
		if it.err != nil && o.ctx.Err() == nil {
			o.log.Warn("replay ended", "filter", rp.filter, "err", it.err)
			o.conn.Disconnect(0x80, "replay of "+rp.filter+" failed")
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
func (o *Session) handover(rp *Replay, at table.Cursor) {
	o.mu.Lock()
	if at.Less(rp.until) || at.Less(rp.held) {
		o.mu.Unlock()
		return
	}
	if at.Less(rp.last) {
		at = rp.last
	}
	o.since.set(rp.filter, logpos.One(at))
	rp.active, rp.at = false, at
	o.mu.Unlock()
	rp.End()
	o.log.Debug("replay caught up; live delivery continues", "filter", rp.filter, "at", at)
}

// deliverReplayed sends one replayed message, at most at QoS 1.
func (o *Session) deliverReplayed(rp *Replay, ev table.Event) {
	if o.ctx.Err() != nil {
		// Closing: left unacknowledged, so the replay's checkpoint stays
		// before it (an access check would fail now and pass it over).
		return
	}
	var m message.Message
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
	if (sub.NoLocal && m.From == o.client) || m.Expired(time.Now()) || !o.conn.MayRead(m.Topic) {
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
	m.UserProps = append(m.UserProps, message.UserProperty{Key: PropPosition, Value: ev.Cursor().String()})
	o.env.Counters.MsgsReplayed.Add(1)
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
func (o *Session) replayDone(rp *Replay) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rp.inflight--
	if !rp.active && rp.inflight <= 0 && o.replays[rp.filter] == rp {
		delete(o.replays, rp.filter)
	}
}

// dropReplayLocked ends and forgets the replay of filter; o.mu held.
func (o *Session) dropReplayLocked(filter string) {
	if rp := o.replays[filter]; rp != nil {
		rp.End()
		delete(o.replays, filter)
	}
	delete(o.posFilters, filter)
}

// endReplays stops every replay's reader (on teardown): their
// checkpoints stay readable for the final persist.
func (o *Session) endReplays() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rp := range o.replays {
		rp.End()
	}
}

// lowCheckpointLocked returns the lowest of cp and the acknowledged
// checkpoints of the replays still running or with deliveries in
// flight; o.mu held.
func (o *Session) lowCheckpointLocked(cp logpos.Vec) logpos.Vec {
	for _, rp := range o.replays {
		if !rp.active && rp.inflight <= 0 {
			continue
		}
		if rcp := rp.checkpointLocked(); rcp.Less(cp.Of(0)) {
			cp.Set(0, rcp)
		}
	}
	return cp
}

// checkpointLocked returns the replay's acknowledged checkpoint, never
// past where live delivery took over: what the replay left unread after
// it is live delivery's; Session.mu held.
func (rp *Replay) checkpointLocked() table.Cursor {
	cp := rp.sub.Checkpoint()
	if !rp.active && rp.at.Less(cp) {
		cp = rp.at
	}
	return cp
}

// CheckpointNow returns the checkpoint a crash now would resume from: the
// session member's, or lower while a replay is behind it.
func (o *Session) CheckpointNow() (logpos.Vec, bool) {
	sub := o.currentSub()
	if sub == nil {
		return logpos.Vec{}, false
	}
	cp := checkpointOf(sub)
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lowCheckpointLocked(cp), true
}
