package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// Store keeps the broker's sessions in its table.DB: it reads a session
// record (judging expiry on the read), discards a session's state whole,
// expires offline sessions through the expiry index, builds the indexes
// once for a store written before them, and finds the lowest checkpoint
// the message log must be kept for. Its methods are safe for concurrent
// use; the tables' layout and invariants are in layout.go.
type Store struct {
	DB  *table.DB
	Log *slog.Logger
	// MaxDeletes bounds the deletions of session state in one commit;
	// read at each use, since an engine may learn a lower commit limit
	// while it runs.
	MaxDeletes func() int
	// Online reports whether client is online on this node and, if so,
	// its acknowledged checkpoint in partition part of the log, at least
	// persisted: newer than the persisted one, which retention may then
	// pass.
	Online func(client string, part int, persisted table.Cursor) (table.Cursor, bool)
	// Gone, if set, is told of a session discarded (expired, or
	// replaced by a clean start) once the discard committed.
	Gone func(client string)
}

// gone tells Gone of client's discarded session.
func (st *Store) gone(client string) {
	if st.Gone != nil {
		st.Gone(client)
	}
}

// MaxLoadAttempts bounds the reads of a session record (and its rows)
// that find it rewritten in between: each one means another commit to it
// landed, which a reader does not race for long.
const MaxLoadAttempts = 5

// The broker's use of the session indexes: IndexCheckpoints builds them
// for a store written before they existed, and retention reads the
// checkpoint index from the bottom (LowestCheckpoint) instead of decoding
// every session record, replacing the stale entries it meets.

// Load reads the session record of client; ok is false when none.
// A session whose expiry passed is discarded here and reported absent: the
// periodic expirer runs once a second and not while the broker is down, and
// an expired session must never be resumed.
func (st *Store) Load(ctx context.Context, client string) (Record, table.Version, bool, error) {
	return st.LoadAt(ctx, client, time.Now())
}

// LoadAt is Load with expiry judged at now.
func (st *Store) LoadAt(ctx context.Context, client string, now time.Time) (Record, table.Version, bool, error) {
	for attempt := 1; ; attempt++ {
		rec, err := st.DB.Get(ctx, Table, client)
		if errors.Is(err, table.ErrNotFound) {
			return Record{}, 0, false, nil
		}
		if err != nil {
			return Record{}, 0, false, err
		}
		var s Record
		if err := Decode(rec.Value, &s); err != nil {
			return Record{}, 0, false, fmt.Errorf("mqtt: session %q: %w", client, err)
		}
		s.Loaded()
		if !s.Expired(now) {
			return s, rec.Version, true, nil
		}
		// Discarded only as read: on a store shared by several nodes
		// this node's view can be behind one where the session came
		// back online elsewhere.
		err = st.DiscardIfAt(ctx, client, rec.Version)
		switch {
		case err == nil:
			return Record{}, 0, false, nil
		case !errors.Is(err, engine.ErrConflict) || attempt == MaxLoadAttempts:
			return Record{}, 0, false, err
		}
	}
}

// DiscardIfAt is Discard conditional on the session record still
// being at version ver: every commit of the discard, the chunks of a large
// session's rows included (see DiscardTx), checks it, so a discard based on
// a stale read deletes nothing of a session that changed since.
func (st *Store) DiscardIfAt(ctx context.Context, client string, ver table.Version) error {
	tx, err := st.DiscardTx(ctx, client, DiscardOptions{IfVersion: ver})
	if err != nil || tx == nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	st.gone(client)
	return nil
}

// Discard deletes every piece of state of client: the session
// record, staged inbound QoS 2 messages, outbound QoS 2 state and completion
// marks. Used for clean start and session expiry.
func (st *Store) Discard(ctx context.Context, client string) error {
	tx, err := st.DiscardTx(ctx, client, DiscardOptions{})
	if err != nil || tx == nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	st.gone(client)
	return nil
}

// DiscardOptions are the choices of a DiscardTx.
type DiscardOptions struct {
	// overwrite leaves the session record out of the deletes (it is still
	// counted as state): the caller writes the new session's record in
	// the same transaction.
	Overwrite bool
	// ifVersion, when not zero, makes every commit of the discard, the
	// returned transaction included, conditional on the session record
	// being at this version.
	IfVersion table.Version
}

// DiscardTx returns a transaction deleting every piece of state of
// client, or nil when there is none.
//
// A session with more rows than one transaction takes loses its
// completion marks, then its outbound and staged rows, in commits of
// Store.MaxDeletes before the returned transaction: the session record
// goes last, so a crash part way leaves a session that is discarded
// again, never rows that a new session of the same client id would adopt.
// A chunk that fails opts.IfVersion ends the discard with an error
// wrapping engine.ErrConflict.
func (st *Store) DiscardTx(ctx context.Context, client string, opts DiscardOptions) (*table.Tx, error) {
	begin := func() *table.Tx {
		tx := st.DB.Begin()
		if opts.IfVersion != 0 {
			tx.ExpectVersion(Table, client, opts.IfVersion)
		}
		return tx
	}
	type row struct{ table, id string }
	var rows []row
	for _, t := range []string{DoneTable, OutTable, StagedTable} {
		err := st.DB.Range(ctx, t, client+Sep, func(r table.Record) bool {
			if !r.Deleted {
				rows = append(rows, row{t, r.ID})
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	chunk := st.MaxDeletes()
	for len(rows) > chunk {
		tx := begin()
		for _, r := range rows[:chunk] {
			tx.DeleteState(r.table, r.id)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		rows = rows[chunk:]
	}
	tx := begin()
	for _, r := range rows {
		tx.DeleteState(r.table, r.id)
	}
	n := len(rows)
	if r, err := st.DB.Get(ctx, Table, client); err == nil {
		if !opts.Overwrite {
			tx.DeleteState(Table, client)
		}
		// The indexes go with the record; an overwrite puts new entries
		// after these deletes, in the same commit.
		var s Record
		if Decode(r.Value, &s) == nil {
			s.Loaded()
			Unindex(tx, client, &s)
		}
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return tx, nil
}

// ExpireDue discards the offline sessions due at now and drops the index
// entries read.
func (st *Store) ExpireDue(ctx context.Context, now time.Time) error {
	due := ExpiryDue(now.UnixMilli())
	chunk := st.MaxDeletes()
	var ids []string
	err := st.DB.Range(ctx, ExpiryTable, "", func(r table.Record) bool {
		if r.ID > due {
			return false
		}
		if !r.Deleted {
			ids = append(ids, r.ID)
		}
		return len(ids) < chunk
	})
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	tx := st.DB.Begin()
	for _, id := range ids {
		client := ExpiryClient(id)
		if _, online := st.Online(client, 0, table.Cursor{}); !online {
			// Load discards a session whose expiry passed.
			if _, _, _, err := st.LoadAt(ctx, client, now); err != nil {
				return fmt.Errorf("expire session %q: %w", client, err)
			}
		}
		tx.DeleteStateUnchecked(ExpiryTable, id)
	}
	return tx.Commit(ctx)
}

// IndexExpiries writes the expiry index entries of offline sessions once,
// for a store written before the index existed.
func (st *Store) IndexExpiries(ctx context.Context) error {
	if _, err := st.DB.Get(ctx, ExpiryTable, ExpiryIndexed); err == nil {
		return nil
	}
	tx := st.DB.Begin()
	n, chunk := 0, st.MaxDeletes()
	err := st.DB.Range(ctx, Table, "", func(r table.Record) bool {
		var s Record
		if r.Deleted || Decode(r.Value, &s) != nil {
			return true
		}
		if d, ok := s.Deadline(); ok {
			if tx.PutStateUnchecked(ExpiryTable, ExpiryID(d, r.ID), nil) == nil {
				n++
			}
		}
		if n == chunk {
			if err := tx.Commit(ctx); err != nil {
				return false
			}
			tx, n = st.DB.Begin(), 0
		}
		return true
	})
	if err != nil {
		return err
	}
	if err := tx.PutState(ExpiryTable, ExpiryIndexed, nil); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// IndexShares writes the share-members index entries of every stored
// session once, for a store written before the index existed, and then
// the marker that says it is complete.
func (st *Store) IndexShares(ctx context.Context) error {
	if _, err := st.DB.Get(ctx, SharesTable, SharesIndexed); err == nil {
		return nil
	} else if !errors.Is(err, table.ErrNotFound) {
		return fmt.Errorf("mqtt: index shared subscriptions: %w", err)
	}
	_, err := st.indexEvery(ctx, SharesTable, SharesIndexed, func(tx *table.Tx, client string, s *Record) (int, error) {
		shares := s.shareKeys()
		for _, sh := range shares {
			if err := tx.PutStateUnchecked(SharesTable, ShareMemberID(sh.Group, sh.Filter, client), nil); err != nil {
				return 0, err
			}
		}
		return len(shares), nil
	})
	if err != nil {
		return fmt.Errorf("mqtt: index shared subscriptions: %w", err)
	}
	return nil
}

// indexEvery runs add on every stored session it can decode, committing
// what add writes (it returns how many writes) in commits of the store's
// size, and then marker, in markerTable, in the last commit. It returns
// how many sessions it ran add on.
func (st *Store) indexEvery(ctx context.Context, markerTable, marker string, add func(tx *table.Tx, client string, s *Record) (int, error)) (int, error) {
	tx := st.DB.Begin()
	n, sessions, chunk := 0, 0, st.MaxDeletes()
	var werr error
	err := st.DB.Range(ctx, Table, "", func(r table.Record) bool {
		var s Record
		if r.Deleted || Decode(r.Value, &s) != nil {
			return true
		}
		var k int
		if k, werr = add(tx, r.ID, &s); werr != nil {
			return false
		}
		n += k
		sessions++
		if n >= chunk {
			if werr = tx.Commit(ctx); werr != nil {
				return false
			}
			tx, n = st.DB.Begin(), 0
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err == nil {
		err = tx.PutStateUnchecked(markerTable, marker, nil)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	return sessions, err
}

// IndexCheckpoints writes the checkpoint and recovery index entries of every
// stored session once, for a store written before the indexes existed,
// and then the marker that says they are complete. Sessions written
// meanwhile index themselves; an entry written from the scan's older
// snapshot is at worst stale, which retention repairs.
func (st *Store) IndexCheckpoints(ctx context.Context) error {
	if _, err := st.DB.Get(ctx, CheckpointTable, CheckpointsIndexed); err == nil {
		return nil
	} else if !errors.Is(err, table.ErrNotFound) {
		return fmt.Errorf("mqtt: index sessions: %w", err)
	}
	start := time.Now()
	sessions, err := st.indexEvery(ctx, CheckpointTable, CheckpointsIndexed, func(tx *table.Tx, client string, s *Record) (int, error) {
		// Index writes the share-members entries too.
		return 2 + len(s.shareKeys()), Index(tx, client, s)
	})
	if err != nil {
		return fmt.Errorf("mqtt: index sessions: %w", err)
	}
	if sessions > 0 {
		st.Log.Info("indexed the stored sessions by checkpoint once", "sessions", sessions, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// LowestCheckpoint returns the lowest checkpoint in partition part of
// the log that a retention pass must keep that partition for: the lowest
// persisted checkpoint of the sessions offline or online elsewhere, and
// the acknowledged one of this node's online sessions (Online), or head
// when all are at or above it. False means stale entries kept it from
// finding out this time; the pass then truncates nothing.
func (st *Store) LowestCheckpoint(ctx context.Context, part int, head table.Cursor) (table.Cursor, bool, error) {
	for range 8 {
		low, done, err := st.lowestRound(ctx, part, head)
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
func (st *Store) lowestRound(ctx context.Context, part int, head table.Cursor) (table.Cursor, bool, error) {
	type entry struct {
		id, client string
		cp         table.Cursor
	}
	low := head
	var check []entry
	full := false
	err := st.DB.Range(ctx, CheckpointTable, CheckpointPartition(part), func(r table.Record) bool {
		cp, client, ok := ParseCheckpointID(part, r.ID)
		if !ok {
			// The first partition's ids sort before the others' (and
			// the marker's), which end its part of the index.
			return part > 0 || r.ID < CheckpointPartition(1)
		}
		if !cp.Less(low) {
			return false // every session further up is at or above low
		}
		if live, on := st.Online(client, part, cp); on {
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
		r, err := st.DB.Get(ctx, Table, e.client)
		if errors.Is(err, table.ErrNotFound) {
			// The session is gone: its entry is not needed, unless the
			// client id comes back meanwhile.
			if fix == nil {
				fix = st.DB.Begin()
			}
			_ = fix.ExpectAbsent(Table, e.client)
			_ = fix.DeleteStateUnchecked(CheckpointTable, e.id)
			continue
		}
		if err != nil {
			return low, false, err
		}
		var s Record
		if Decode(r.Value, &s) != nil {
			continue // a record no resume can read holds nothing back
		}
		if s.Checkpoint.Of(part) == e.cp {
			if e.cp.Less(low) {
				low = e.cp
			}
			confirmed = true
			break
		}
		// Stale: the record moved on, possibly to an entry this snapshot
		// does not show; its own checkpoint bounds the pass.
		if s.Checkpoint.Of(part).Less(low) {
			low = s.Checkpoint.Of(part)
		}
		if fix == nil {
			fix = st.DB.Begin()
		}
		_ = fix.ExpectVersion(Table, e.client, r.Version)
		_ = fix.DeleteStateUnchecked(CheckpointTable, e.id)
		_ = fix.PutStateUnchecked(CheckpointTable, CheckpointID(part, s.Checkpoint.Of(part), e.client), nil)
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
