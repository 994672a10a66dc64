package delivery

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// A session's delivery state in the store: the session record (its
// subscriptions, its acknowledged checkpoint, the packet ids of QoS 1
// deliveries in flight) and the QoS 2 completion marks above that
// checkpoint, which each checkpoint write sweeps.

// persistEvery bounds the deliveries an online session completes between
// two writes of its checkpoint, whatever its window: what a crash re-sends
// to a subscriber that was online. One small commit per this many
// deliveries.
const persistEvery = 256

// Persist writes the session record with the acknowledged checkpoint and
// drops completion marks it covers. final waits for the commits.
//
// One commit drops at most Env.MaxStateDeletes marks. A subscriber taking more
// QoS 2 messages than that between two persists leaves more behind, so
// Persist goes on with further commits until none is left: otherwise the
// marks (in memory and in the store) would grow for as long as the load
// lasts. Each of those commits carries the session record too, so no
// commit deletes a mark without the checkpoint that covers it.
func (o *Session) Persist(ctx context.Context, final bool) error {
	return o.persist(ctx, final, false)
}

// persist is Persist; posted says it runs on a store goroutine (see
// checkpointPosted), where it submits in place and does not wait for the
// record: a store goroutine waiting for a lock that a writer holds while
// it waits for a store goroutine would be a deadlock once all wait so.
// It reports errBusy when the record is being written.
func (o *Session) persist(ctx context.Context, final, posted bool) error {
	sub := o.currentSub()
	if sub == nil && !final {
		return nil
	}
	// Without a sender (the connection ended before its CONNACK went
	// out) the final write keeps the record's checkpoint.
	if !final && !o.due(checkpointOf(sub)) && !o.garbage() && !o.lazy.pending() {
		return nil
	}
	if posted {
		if !o.recordMu.TryLock() {
			return errBusy
		}
	} else {
		o.recordMu.Lock()
	}
	defer o.recordMu.Unlock()
	if o.stopped && !final {
		return nil // the connection's last write comes after it, or came
	}
	tx, cp, more, err := o.sessionSweepTx(!final)
	if err != nil {
		return err
	}
	// The exchange endings held back go with the checkpoint.
	ends, err := o.writeLazy(tx, &cp)
	if err != nil {
		return err
	}
	var last *engine.Handle
	for {
		if !final {
			tx.Defer()
		}
		// On a store goroutine: a sender's runner would grow its stack
		// for the engine's commit path, and a wave of checkpoints after
		// a delivery to many sessions starts many runners (see Env.OnStore).
		if !final {
			if o.env.BeforeCheckpoint != nil {
				o.env.BeforeCheckpoint(o.client)
			}
		}
		var h *engine.Handle
		if posted {
			h, err = tx.Submit(ctx)
		} else {
			o.env.OnStore(func() { h, err = tx.Submit(ctx) })
		}
		if err != nil {
			if last == nil {
				// Never submitted: the records stay, and their ids may
				// be reused (a reuse overwrites the record).
				o.ended(ends)
			}
			return err
		}
		if last == nil && len(ends) > 0 && !final {
			// Not in the connection's FIFO: a checkpoint may wait for
			// company before its sync (Defer), and the acknowledgements
			// behind it would wait with it.
			go o.endedAfter(h, ends)
		}
		last = h
		if !more {
			break
		}
		if tx, _, more, err = o.sessionSweepTx(!final); err != nil {
			return err
		}
	}
	if final {
		// Handles complete in submission order: the last one done means
		// every one is.
		if _, err = last.Wait(ctx); err == nil {
			o.ended(ends)
		}
		return err
	}
	return nil
}

// endedAfter frees the packet ids of ends once h, the commit that wrote
// them, has completed. A failed commit ends the connection, as one in its
// FIFO would.
func (o *Session) endedAfter(h *engine.Handle, ends []lazyEnd) {
	if _, err := h.Wait(o.ctx); err != nil {
		if o.ctx.Err() == nil {
			o.conn.Warn("end QoS 2 deliveries", err)
			o.conn.Fail(err)
		}
		return
	}
	o.ended(ends)
}

// PersistLast is the final Persist of a connection leaving its session
// offline. connRowless says the connection's own side (its inbound QoS 2
// messages) leaves no row; with the session's outbound side leaving none
// either, the record says so (session.Record.Rowless) and the next
// connection skips reading them.
func (o *Session) PersistLast(ctx context.Context, connRowless bool) error {
	o.leaving.Store(connRowless)
	return o.Persist(ctx, true)
}

// due reports whether a checkpoint at cp is worth a commit now. A
// checkpoint that moved only over messages for other sessions changes
// nothing a restart would re-send, so it is written only now and then
// (for retention after a crash and a shorter replay scan); one that moved
// over deliveries this session completed is written at once, so a crash
// re-sends at most what was in flight.
//
// Both the sender and the read loop (a burst of PUBCOMPs, see finishQoS2)
// ask, so what the last write recorded is read under mu, where
// sessionSweepTx writes it.
func (o *Session) due(cp logpos.Vec) bool {
	o.mu.Lock()
	persisted, persistedAt := o.persisted, o.persistedAt
	o.mu.Unlock()
	if cp == persisted {
		return false
	}
	if o.progress.Load() != o.persistedProgress.Load() || o.asked.Swap(false) {
		return true
	}
	return time.Since(persistedAt) >= o.env.RetentionEvery
}

// PersistedBefore reports whether the session last wrote its checkpoint
// before t (or never did).
func (o *Session) PersistedBefore(t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.persistedAt.Before(t)
}

// SessionTx returns a transaction writing the session record as it stands:
// subscriptions, acknowledged checkpoint, and the deletes of up to
// Env.MaxStateDeletes completion marks it covers (persist drops the rest).
func (o *Session) SessionTx() (*table.Tx, error) {
	tx, _, _, err := o.sessionSweepTx(false)
	return tx, err
}

// sessionSweepTx is sessionTx, also returning the checkpoint it writes and
// reporting whether covered completion marks are left for another commit.
// lazy says the write is a checkpoint of the connected session, which
// may leave the record's index entries as they are (Env.IndexEvery).
func (o *Session) sessionSweepTx(lazy bool) (*table.Tx, logpos.Vec, bool, error) {
	var cp logpos.Vec
	if sub := o.currentSub(); sub != nil {
		cp = checkpointOf(sub)
	} else {
		cp = o.rec.Checkpoint
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// A replay behind the member holds the persisted checkpoint back, and
	// the other filters' since positions at the member's checkpoint, so a
	// resume re-sends the replay's unacknowledged rest and nothing else
	// (see replay.go).
	memberCP := cp
	cp = o.lowCheckpointLocked(cp)
	o.rec.Checkpoint = cp
	o.rec.Rowless = o.leaving.Load() && !o.wroteRows.Load()
	o.rec.NextPI = o.nextPI
	o.rec.SentHigh = o.sentHigh
	o.rec.Q1 = o.rec.Q1[:0]
	if o.inflightQ1 > 0 {
		for _, om := range o.inflight {
			if om.qos == 1 && om.hasEv {
				o.rec.Q1 = append(o.rec.Q1, session.Q1Slot{Pos: om.pos, PI: om.pi})
			}
		}
	}
	for pos, pi := range o.q1ids { // restored, not re-sent yet
		if !cp.Covers(pos) {
			o.rec.Q1 = append(o.rec.Q1, session.Q1Slot{Pos: pos, PI: pi})
		}
	}
	o.rec.Subs = o.rec.Subs[:0]
	for _, s := range o.subs {
		r := session.SubOf(s)
		r.Pos = s.Group == "" && o.posFilters[s.Filter]
		if since, ok := o.since.get(s.Filter); ok && s.Group == "" {
			if memberCP.Below(since) {
				r.Since = &since
			} else {
				o.since.del(s.Filter) // the checkpoint passed it: no message left to hold back
			}
		}
		if s.Group == "" && cp.Below(memberCP) {
			if rp := o.replays[s.Filter]; rp != nil && (rp.active || rp.inflight > 0) {
				rcp := logpos.One(rp.checkpointLocked())
				r.Since = &rcp
			} else if r.Since == nil {
				r.Since = &memberCP
			} else if r.Since.Below(memberCP) {
				up := r.Since.Max(memberCP)
				r.Since = &up
			}
		}
		o.rec.Subs = append(o.rec.Subs, r)
	}
	tx := o.db.Begin()
	more := o.sweepDoneLocked(tx, cp)
	if lazy {
		o.rec.IndexLazily(o.env.IndexEvery)
	}
	if err := session.Put(tx, o.client, o.rec); err != nil {
		return nil, cp, false, err
	}
	o.persisted = cp
	o.persistedProgress.Store(o.progress.Load())
	o.persistedAt = time.Now()
	return tx, cp, more, nil
}
