package mqtt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Two on-disk indexes keep the broker's periodic and startup work in
// proportion to what it has to look at, not to the number of stored
// sessions; both are unchecked state written in the commit that writes the
// session record (putSession).
//
// The checkpoint index (tableCheckpoints) holds one entry per stored
// session under its persisted checkpoint, with ids that sort as the
// checkpoints do. Retention reads it from the bottom: the entries of this
// node's online sessions, whose acknowledged checkpoint is in memory, and
// the first offline one, instead of decoding every session record. Every
// stored session has an entry at or below its persisted checkpoint: a
// write that moves the checkpoint puts the new entry and drops the old
// one (sessionRecord.indexed) in the same commit. An entry may outlive
// what it stood for (a commit that failed after putSession moved the
// in-memory copy on, an index built from an older snapshot, a session
// discarded with another checkpoint): retention reads the record behind
// any entry it would stop at, bounds the pass by the record's own
// checkpoint, and replaces the stale entry by the record's.
//
// The recovery index (tableRecover) holds the client ids of sessions
// whose record is online or holds a will: what a restart has to look at
// (recoverWills). An entry whose record no longer needs it is passed
// over.
const (
	tableCheckpoints = "mqtt.checkpoints" // id = checkpoint (hex key, hex index), NUL, client id (unchecked state)
	tableRecover     = "mqtt.recover"     // id = client id of a session online or holding a will (unchecked state)
)

// sessionsIndexed marks a store whose checkpoint and recovery indexes are
// complete; it sorts after every checkpoint id.
const sessionsIndexed = "~indexed"

// checkpointID is the checkpoint index's id of client at cp. The 24 hex
// digits are the log key and the entry index cp stands for, the index of
// a whole-key cursor being all ones, so ids sort as table.Cursor.Less.
func checkpointID(cp table.Cursor, client string) string {
	idx := uint32(math.MaxUint32)
	if cp.Next > 0 {
		idx = cp.Next - 1
	}
	var b [24]byte
	hexPad(b[:16], uint64(cp.Key))
	hexPad(b[16:], uint64(idx))
	return string(b[:]) + slotSep + client
}

// hexPad writes v in lower-case hex into all of b, zero-padded.
func hexPad(b []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
}

// parseCheckpointID reverses checkpointID; false for any other id (the
// marker).
func parseCheckpointID(id string) (table.Cursor, string, bool) {
	if len(id) < 25 || id[24] != slotSep[0] {
		return table.Cursor{}, "", false
	}
	k, err1 := strconv.ParseUint(id[:16], 16, 64)
	idx, err2 := strconv.ParseUint(id[16:24], 16, 32)
	if err1 != nil || err2 != nil {
		return table.Cursor{}, "", false
	}
	cp := table.Cursor{Key: engine.LogKey(k)}
	if idx != math.MaxUint32 {
		cp.Next = uint32(idx) + 1
	}
	return cp, id[25:], true
}

// loaded records that s was read from the store: its index entries are
// those of its checkpoint and flags.
func (s *sessionRecord) loaded() {
	s.indexed, s.hasIndexed = s.Checkpoint, true
	s.flagged = s.Online || s.Will != nil
}

// needsRecovery reports whether a restart must look at s: it is online
// (a broker that stops cleanly leaves none so) or holds a will.
func (s *sessionRecord) needsRecovery() bool { return s.Online || s.Will != nil }

// indexSession adds to tx the index entries of s as it is being written:
// its checkpoint entry when the checkpoint moved (dropping the old one),
// and its recovery entry while it needs one. The recovery entry is put on
// every write that needs it, so a record that needs it never goes
// without, whatever commit failed before.
func indexSession(tx *table.Tx, client string, s *sessionRecord) error {
	if !s.hasIndexed || s.indexed != s.Checkpoint {
		if s.hasIndexed {
			if err := tx.DeleteStateUnchecked(tableCheckpoints, checkpointID(s.indexed, client)); err != nil {
				return err
			}
		}
		if err := tx.PutStateUnchecked(tableCheckpoints, checkpointID(s.Checkpoint, client), nil); err != nil {
			return err
		}
		s.indexed, s.hasIndexed = s.Checkpoint, true
	}
	switch {
	case s.needsRecovery():
		if err := tx.PutStateUnchecked(tableRecover, client, nil); err != nil {
			return err
		}
		s.flagged = true
	case s.flagged:
		if err := tx.DeleteStateUnchecked(tableRecover, client); err != nil {
			return err
		}
		s.flagged = false
	}
	return nil
}

// unindexSession adds to tx the deletion of the index entries of s, a
// record read from the store that tx deletes.
func unindexSession(tx *table.Tx, client string, s *sessionRecord) {
	if s.hasIndexed {
		_ = tx.DeleteStateUnchecked(tableCheckpoints, checkpointID(s.indexed, client))
	}
	if s.flagged {
		_ = tx.DeleteStateUnchecked(tableRecover, client)
	}
}

// indexSessions writes the checkpoint and recovery index entries of every
// stored session once, for a store written before the indexes existed,
// and then the marker that says they are complete. Sessions written
// meanwhile index themselves; an entry written from the scan's older
// snapshot is at worst stale, which retention repairs.
func (b *Broker) indexSessions(ctx context.Context) error {
	if _, err := b.db.Get(ctx, tableCheckpoints, sessionsIndexed); err == nil {
		return nil
	} else if !errors.Is(err, table.ErrNotFound) {
		return fmt.Errorf("mqtt: index sessions: %w", err)
	}
	start := time.Now()
	tx := b.db.Begin()
	n, sessions, chunk := 0, 0, b.maxStateDeletes()
	var werr error
	err := b.db.Range(ctx, tableSessions, "", func(r table.Record) bool {
		var s sessionRecord
		if decodeSession(r.Value, &s) != nil {
			return true
		}
		if werr = indexSession(tx, r.ID, &s); werr != nil {
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
		err = tx.PutStateUnchecked(tableCheckpoints, sessionsIndexed, nil)
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
	err := b.db.Range(ctx, tableCheckpoints, "", func(r table.Record) bool {
		cp, client, ok := parseCheckpointID(r.ID)
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
		r, err := b.db.Get(ctx, tableSessions, e.client)
		if errors.Is(err, table.ErrNotFound) {
			// The session is gone: its entry is not needed, unless the
			// client id comes back meanwhile.
			if fix == nil {
				fix = b.db.Begin()
			}
			_ = fix.ExpectAbsent(tableSessions, e.client)
			_ = fix.DeleteStateUnchecked(tableCheckpoints, e.id)
			continue
		}
		if err != nil {
			return low, false, err
		}
		var s sessionRecord
		if decodeSession(r.Value, &s) != nil {
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
		_ = fix.ExpectVersion(tableSessions, e.client, r.Version)
		_ = fix.DeleteStateUnchecked(tableCheckpoints, e.id)
		_ = fix.PutStateUnchecked(tableCheckpoints, checkpointID(s.Checkpoint, e.client), nil)
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
