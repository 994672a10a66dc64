package delivery

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// A session's completion marks: a QoS 2 delivery that completed above the
// checkpoint leaves a mark in session.DoneTable (written with the delete of its
// record), so a resume from the checkpoint does not send it again. Once
// the persisted checkpoint passes a mark it is garbage, and the
// checkpoint writes sweep it.

// markDone records that the QoS 2 delivery at pos completed above the
// checkpoint; o.mu held.
func (o *Session) markDone(pos logpos.Pos) {
	if o.done == nil {
		o.done = map[logpos.Pos]bool{}
	}
	o.done[pos] = true
}

// restoreDone puts the session's stored completion marks (see Restored)
// back. Run by New before the sender starts.
func (o *Session) restoreDone(marks []logpos.Pos) {
	for _, cur := range marks {
		o.markDone(cur)
	}
}

// garbage reports whether completion marks at or below the persisted
// checkpoint are still waiting to be deleted.
func (o *Session) garbage() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for pos := range o.done {
		if o.persisted.Covers(pos) {
			return true
		}
	}
	return false
}

// sweepDoneLocked adds to tx the deletes of the completion marks at or
// below cp, the checkpoint tx writes, and reports whether more are left
// for another commit; o.mu held. Marks at or below the checkpoint are
// garbage: they are dropped at most Env.MaxStateDeletes per commit so
// the transaction stays within the engine's batch limit. The mark of an
// exchange whose ending is held back (o.ending) stays: it may not be
// written yet.
func (o *Session) sweepDoneLocked(tx *table.Tx, cp logpos.Vec) (more bool) {
	if len(o.done) == 0 {
		return false // most checkpoints: no QoS 2 delivery ended since the last
	}
	n, chunk := 0, o.env.MaxStateDeletes
	var held map[logpos.Pos]bool
	if len(o.ending) > 0 {
		held = make(map[logpos.Pos]bool, len(o.ending))
		for _, pos := range o.ending {
			held[pos] = true // its mark may not be written yet
		}
	}
	for pos := range o.done {
		if !cp.Covers(pos) || held[pos] {
			continue
		}
		if n == chunk {
			more = true
			break
		}
		tx.DeleteStateUnchecked(session.DoneTable, session.DoneID(o.client, pos))
		delete(o.done, pos)
		n++
	}
	return more
}
