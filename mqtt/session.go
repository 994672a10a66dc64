package mqtt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// loadSession reads the session record of client; ok is false when none.
// A session whose expiry passed is discarded here and reported absent: the
// periodic expirer runs once a second and not while the broker is down, and
// an expired session must never be resumed.
func (b *Broker) loadSession(ctx context.Context, client string) (session.Record, table.Version, bool, error) {
	return b.loadSessionAt(ctx, client, time.Now())
}

// loadSessionAt is loadSession with expiry judged at now.
func (b *Broker) loadSessionAt(ctx context.Context, client string, now time.Time) (session.Record, table.Version, bool, error) {
	for attempt := 1; ; attempt++ {
		rec, err := b.db.Get(ctx, session.Table, client)
		if errors.Is(err, table.ErrNotFound) {
			return session.Record{}, 0, false, nil
		}
		if err != nil {
			return session.Record{}, 0, false, err
		}
		var s session.Record
		if err := session.Decode(rec.Value, &s); err != nil {
			return session.Record{}, 0, false, fmt.Errorf("mqtt: session %q: %w", client, err)
		}
		s.Loaded()
		if !s.Expired(now) {
			return s, rec.Version, true, nil
		}
		// Discarded only as read: on a store shared by several nodes
		// this node's view can be behind one where the session came
		// back online elsewhere.
		err = b.discardRead(ctx, client, rec.Version)
		switch {
		case err == nil:
			return session.Record{}, 0, false, nil
		case !errors.Is(err, engine.ErrConflict) || attempt == maxLoadAttempts:
			return session.Record{}, 0, false, err
		}
	}
}

// discardRead is discardSession conditional on the session record still
// being at version ver: every commit of the discard, the chunks of a large
// session's rows included (see discardTx), checks it, so a discard based on
// a stale read deletes nothing of a session that changed since.
func (b *Broker) discardRead(ctx context.Context, client string, ver table.Version) error {
	tx, err := b.discardTx(ctx, client, discardOpts{ifVersion: ver})
	if err != nil || tx == nil {
		return err
	}
	return tx.Commit(ctx)
}

// discardSession deletes every piece of state of client: the session
// record, staged inbound QoS 2 messages, outbound QoS 2 state and completion
// marks. Used for clean start and session expiry.
func (b *Broker) discardSession(ctx context.Context, client string) error {
	tx, err := b.discardTx(ctx, client, discardOpts{})
	if err != nil || tx == nil {
		return err
	}
	return tx.Commit(ctx)
}

// discardOpts are the choices of a discardTx.
type discardOpts struct {
	// overwrite leaves the session record out of the deletes (it is still
	// counted as state): the caller writes the new session's record in
	// the same transaction.
	overwrite bool
	// ifVersion, when not zero, makes every commit of the discard, the
	// returned transaction included, conditional on the session record
	// being at this version.
	ifVersion table.Version
}

// discardTx returns a transaction deleting every piece of state of
// client, or nil when there is none.
//
// A session with more rows than one transaction takes loses its
// completion marks, then its outbound and staged rows, in commits of
// Broker.maxStateDeletes before the returned transaction: the session record
// goes last, so a crash part way leaves a session that is discarded
// again, never rows that a new session of the same client id would adopt.
// A chunk that fails opts.ifVersion ends the discard with an error
// wrapping engine.ErrConflict.
func (b *Broker) discardTx(ctx context.Context, client string, opts discardOpts) (*table.Tx, error) {
	begin := func() *table.Tx {
		tx := b.db.Begin()
		if opts.ifVersion != 0 {
			tx.ExpectVersion(session.Table, client, opts.ifVersion)
		}
		return tx
	}
	type row struct{ table, id string }
	var rows []row
	for _, t := range []string{tableDone, tableOut, tableStaged} {
		err := b.db.Range(ctx, t, client+slotSep, func(r table.Record) bool {
			if !r.Deleted {
				rows = append(rows, row{t, r.ID})
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	chunk := b.maxStateDeletes()
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
	if r, err := b.db.Get(ctx, session.Table, client); err == nil {
		if !opts.overwrite {
			tx.DeleteState(session.Table, client)
		}
		// The indexes go with the record; an overwrite puts new entries
		// after these deletes, in the same commit.
		var s session.Record
		if session.Decode(r.Value, &s) == nil {
			s.Loaded()
			session.Unindex(tx, client, &s)
		}
		n++
	}
	if n == 0 {
		return nil, nil
	}
	return tx, nil
}

// maxStateDeletes bounds the deletions of session state in one commit:
// a quarter of engine.MaxBatchEntries (each is up to two engine entries,
// record and version), less on an engine whose atomic commits are smaller
// (JetStream on a server limiting atomic batches to 1000 messages), where
// room is left for the held-back exchange endings (two entries each) and
// the session record that ride in the same commit. It is read at each
// use: such an engine may learn a lower limit while it runs.
func (b *Broker) maxStateDeletes() int {
	limit := engine.MaxCommitEntries(b.db.Engine())
	return max(1, min(engine.MaxBatchEntries/4, (limit-2*b.maxLazy()-16)/2))
}

// maxLazy bounds the exchange endings a connection holds back (see
// delivery.MaxLazyEnds): that, or an eighth of a smaller engine commit limit.
func (b *Broker) maxLazy() int {
	return max(1, min(delivery.MaxLazyEnds, engine.MaxCommitEntries(b.db.Engine())/8))
}

// expireSessions deletes offline sessions whose expiry interval passed.
// It reads the expiry index up to now, so a pass costs what is due, not
// the number of sessions.
func (b *Broker) expireSessions() {
	defer b.wg.Done()
	if err := b.indexExpiries(b.ctx); err != nil && b.ctx.Err() == nil {
		b.log.Warn("building the session expiry index", "err", err)
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if err := b.expireDue(b.ctx, time.Now()); err != nil && b.ctx.Err() == nil {
			b.log.Warn("session expiry failed", "err", err)
		}
	}
}

// expireDue discards the offline sessions due at now and drops the index
// entries read.
func (b *Broker) expireDue(ctx context.Context, now time.Time) error {
	due := session.ExpiryDue(now.UnixMilli())
	chunk := b.maxStateDeletes()
	var ids []string
	err := b.db.Range(ctx, session.ExpiryTable, "", func(r table.Record) bool {
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
	tx := b.db.Begin()
	for _, id := range ids {
		client := session.ExpiryClient(id)
		b.mu.Lock()
		_, online := b.conns[client]
		b.mu.Unlock()
		if !online {
			// loadSession discards a session whose expiry passed.
			if _, _, _, err := b.loadSessionAt(ctx, client, now); err != nil {
				return fmt.Errorf("expire session %q: %w", client, err)
			}
		}
		tx.DeleteStateUnchecked(session.ExpiryTable, id)
	}
	return tx.Commit(ctx)
}

// indexExpiries writes the expiry index entries of offline sessions once,
// for a store written before the index existed.
func (b *Broker) indexExpiries(ctx context.Context) error {
	if _, err := b.db.Get(ctx, session.ExpiryTable, session.ExpiryIndexed); err == nil {
		return nil
	}
	tx := b.db.Begin()
	n, chunk := 0, b.maxStateDeletes()
	err := b.db.Range(ctx, session.Table, "", func(r table.Record) bool {
		var s session.Record
		if r.Deleted || session.Decode(r.Value, &s) != nil {
			return true
		}
		if d, ok := s.Deadline(); ok {
			if tx.PutStateUnchecked(session.ExpiryTable, session.ExpiryID(d, r.ID), nil) == nil {
				n++
			}
		}
		if n == chunk {
			if err := tx.Commit(ctx); err != nil {
				return false
			}
			tx, n = b.db.Begin(), 0
		}
		return true
	})
	if err != nil {
		return err
	}
	if err := tx.PutState(session.ExpiryTable, session.ExpiryIndexed, nil); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
