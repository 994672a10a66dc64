package mqtt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// The broker's use of the session indexes (see package
// mqtt/internal/session for their layout and invariants): indexSessions
// builds them for a store written before they existed, and retention
// reads the checkpoint index from the bottom (lowestCheckpoint) instead of
// decoding every session record, replacing the stale entries it meets.

// indexSessions writes the checkpoint and recovery index entries of every
// stored session once, for a store written before the indexes existed,
// and then the marker that says they are complete. Sessions written
// meanwhile index themselves; an entry written from the scan's older
// snapshot is at worst stale, which retention repairs.
func (b *Broker) indexSessions(ctx context.Context) error {
	if _, err := b.db.Get(ctx, session.CheckpointTable, session.CheckpointsIndexed); err == nil {
		return nil
	} else if !errors.Is(err, table.ErrNotFound) {
		return fmt.Errorf("mqtt: index sessions: %w", err)
	}
	start := time.Now()
	tx := b.db.Begin()
	n, sessions, chunk := 0, 0, b.maxStateDeletes()
	var werr error
	err := b.db.Range(ctx, session.Table, "", func(r table.Record) bool {
		var s session.Record
		if session.Decode(r.Value, &s) != nil {
			return true
		}
		if werr = session.Index(tx, r.ID, &s); werr != nil {
			return false
		}
		n += 2
		sessions++
		if n >= chunk {
			if werr = tx.Commit(ctx); werr != nil {
				return false
			}
			tx, n = b.db.Begin(), 0
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err == nil {
		err = tx.PutStateUnchecked(session.CheckpointTable, session.CheckpointsIndexed, nil)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("mqtt: index sessions: %w", err)
	}
	if sessions > 0 {
		b.log.Info("indexed the stored sessions by checkpoint once", "sessions", sessions, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// lowestCheckpoint returns the lowest checkpoint a retention pass must
// keep the log for: the lowest persisted checkpoint of the sessions
// offline or online elsewhere, and the acknowledged one of this node's
// online sessions (liveCheckpoint), or head when all are at or above it.
// False means stale entries kept it from finding out this time; the pass
// then truncates nothing.
func (b *Broker) lowestCheckpoint(ctx context.Context, head table.Cursor) (table.Cursor, bool, error) {
	for range 8 {
		low, done, err := b.lowestRound(ctx, head)
		if err != nil || done {
			return low, done, err
		}
	}
	return table.Cursor{}, false, nil
}

// checkBatch is how many entries of sessions that are not online here one
// round of lowestRound reads records for.
const checkBatch = 64

// lowestRound reads the checkpoint index from the bottom, up to the first
// entry that its record confirms; false when checkBatch stale entries came
// first (they are replaced, and the caller goes round again).
func (b *Broker) lowestRound(ctx context.Context, head table.Cursor) (table.Cursor, bool, error) {
	type entry struct {
		id, client string
		cp         table.Cursor
	}
	low := head
	var check []entry
	full := false
	err := b.db.Range(ctx, session.CheckpointTable, "", func(r table.Record) bool {
		cp, client, ok := session.ParseCheckpointID(r.ID)
		if !ok {
			return true
		}
		if !cp.Less(low) {
			return false // every session further up is at or above low
		}
		if live, on := b.onlineCheckpoint(client, cp); on {
			if live.Less(low) {
				low = live
			}
			return true
		}
		check = append(check, entry{r.ID, client, cp})
		full = len(check) == checkBatch
		return !full
	})
	if err != nil {
		return low, false, err
	}
	var fix *table.Tx
	confirmed := false
	for _, e := range check {
		r, err := b.db.Get(ctx, session.Table, e.client)
		if errors.Is(err, table.ErrNotFound) {
			// The session is gone: its entry is not needed, unless the
			// client id comes back meanwhile.
			if fix == nil {
				fix = b.db.Begin()
			}
			_ = fix.ExpectAbsent(session.Table, e.client)
			_ = fix.DeleteStateUnchecked(session.CheckpointTable, e.id)
			continue
		}
		if err != nil {
			return low, false, err
		}
		var s session.Record
		if session.Decode(r.Value, &s) != nil {
			continue // a record no resume can read holds nothing back
		}
		if s.Checkpoint == e.cp {
			if e.cp.Less(low) {
				low = e.cp
			}
			confirmed = true
			break
		}
		// Stale: the record moved on, possibly to an entry this snapshot
		// does not show; its own checkpoint bounds the pass.
		if s.Checkpoint.Less(low) {
			low = s.Checkpoint
		}
		if fix == nil {
			fix = b.db.Begin()
		}
		_ = fix.ExpectVersion(session.Table, e.client, r.Version)
		_ = fix.DeleteStateUnchecked(session.CheckpointTable, e.id)
		_ = fix.PutStateUnchecked(session.CheckpointTable, session.CheckpointID(s.Checkpoint, e.client), nil)
	}
	if fix != nil {
		// A conflict means a session was written meanwhile: the next pass
		// looks again.
		if err := fix.Commit(ctx); err != nil && !errors.Is(err, engine.ErrConflict) {
			return low, false, err
		}
	}
	return low, confirmed || !full, nil
}

// onlineCheckpoint returns the acknowledged checkpoint of client when it
// is online on this node (see liveCheckpoint), at least persisted.
func (b *Broker) onlineCheckpoint(client string, persisted table.Cursor) (table.Cursor, bool) {
	b.mu.Lock()
	_, on := b.conns[client]
	b.mu.Unlock()
	if !on {
		return persisted, false
	}
	return b.liveCheckpoint(client, persisted), true
}
