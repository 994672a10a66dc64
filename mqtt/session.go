package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// neverExpires is the 5.0 session expiry that means "never".
const neverExpires = 0xFFFFFFFF

// sessionRecord is what the broker persists per client id.
type sessionRecord struct {
	Version packet.Version `json:"v"`
	// Expiry is the session expiry interval in seconds (neverExpires for
	// 3.1.1 persistent sessions).
	Expiry uint32 `json:"expiry"`
	// Online is set while a connection holds the session; a session found
	// online at startup belonged to a broker that crashed.
	Online bool `json:"online,omitempty"`
	// Node and Conn name the broker node and the connection holding the
	// session; Claimed is set while a connection on Node waits for the
	// previous holder on another node to hand the session over.
	Node    string `json:"node,omitempty"`
	Conn    string `json:"conn,omitempty"`
	Claimed bool   `json:"claimed,omitempty"`
	// DisconnectedAt is when the session went offline (Unix ms).
	DisconnectedAt int64        `json:"disc,omitempty"`
	Subs           []subRecord  `json:"subs,omitempty"`
	Checkpoint     table.Cursor `json:"cp"`
	SentHigh       table.Cursor `json:"sent"`
	Will           *willRecord  `json:"will,omitempty"`
	NextPI         uint16       `json:"pi,omitempty"`
	// Q1 is the QoS 1 deliveries unacknowledged when the record was
	// written, so a re-send after a reconnect or restart keeps the packet
	// id [MQTT-4.4.0-1]. Exact across a disconnect or a clean stop; after a
	// crash, deliveries sent since the last checkpoint write get new ids.
	Q1 []q1Slot `json:"q1,omitempty"`

	// indexed is the checkpoint the checkpoint index holds an entry for,
	// as far as this copy knows (hasIndexed), and flagged whether the
	// recovery index may hold one: putSession moves the entries along
	// (see checkpoints.go).
	indexed    table.Cursor
	hasIndexed bool
	flagged    bool
}

// q1Slot is one unacknowledged QoS 1 delivery: its log position and id.
type q1Slot struct {
	Pos table.Cursor `json:"pos"`
	PI  uint16       `json:"pi"`
}

type subRecord struct {
	Filter string `json:"f"`
	Group  string `json:"g,omitempty"`
	QoS    byte   `json:"q"`
	NL     bool   `json:"nl,omitempty"`
	RAP    bool   `json:"rap,omitempty"`
	RH     byte   `json:"rh,omitempty"`
	ID     uint32 `json:"id,omitempty"`
	// Since is the log position a plain subscription was made at, kept
	// while the checkpoint is below it (see outbound.since).
	Since *table.Cursor `json:"s,omitempty"`
	// Pos says its deliveries carry their log position (PropPosition):
	// it was made with a replay.
	Pos bool `json:"pos,omitempty"`
}

func (s subRecord) sub(client string) topic.Subscription {
	return topic.Subscription{Client: client, Filter: s.Filter, Group: s.Group, QoS: s.QoS,
		NoLocal: s.NL, RetainAsPublished: s.RAP, RetainHandling: s.RH, ID: s.ID}
}

func recordOf(s topic.Subscription) subRecord {
	return subRecord{Filter: s.Filter, Group: s.Group, QoS: s.QoS, NL: s.NoLocal, RAP: s.RetainAsPublished, RH: s.RetainHandling, ID: s.ID}
}

type willRecord struct {
	Msg   []byte `json:"msg"` // Message stored form
	Delay uint32 `json:"delay,omitempty"`
}

// expired reports whether the session is offline and its expiry interval
// has passed at now.
func (s *sessionRecord) expired(now time.Time) bool {
	return !s.Online && s.Expiry != neverExpires && s.DisconnectedAt > 0 &&
		now.UnixMilli() >= s.DisconnectedAt+int64(s.Expiry)*1000
}

// loadSession reads the session record of client; ok is false when none.
// A session whose expiry passed is discarded here and reported absent: the
// periodic expirer runs once a second and not while the broker is down, and
// an expired session must never be resumed.
func (b *Broker) loadSession(ctx context.Context, client string) (sessionRecord, table.Version, bool, error) {
	return b.loadSessionAt(ctx, client, time.Now())
}

// loadSessionAt is loadSession with expiry judged at now.
func (b *Broker) loadSessionAt(ctx context.Context, client string, now time.Time) (sessionRecord, table.Version, bool, error) {
	rec, err := b.db.Get(ctx, tableSessions, client)
	if errors.Is(err, table.ErrNotFound) {
		return sessionRecord{}, 0, false, nil
	}
	if err != nil {
		return sessionRecord{}, 0, false, err
	}
	var s sessionRecord
	if err := decodeSession(rec.Value, &s); err != nil {
		return sessionRecord{}, 0, false, fmt.Errorf("mqtt: session %q: %w", client, err)
	}
	s.loaded()
	if s.expired(now) {
		if err := b.discardSession(ctx, client); err != nil {
			return sessionRecord{}, 0, false, err
		}
		return sessionRecord{}, 0, false, nil
	}
	return s, rec.Version, true, nil
}

// putSession adds the session record to tx, with its entries in the
// checkpoint and recovery indexes (see indexSession) and, for an offline
// session that expires, its entry in the expiry index.
func putSession(tx *table.Tx, client string, s *sessionRecord) error {
	if err := tx.PutState(tableSessions, client, encodeSession(s)); err != nil {
		return err
	}
	if err := indexSession(tx, client, s); err != nil {
		return err
	}
	if d, ok := s.deadline(); ok {
		return tx.PutStateUnchecked(tableExpiry, expiryID(d, client), nil)
	}
	return nil
}

// deadline returns when an offline session expires (Unix ms); false for
// one that is online or never expires.
func (s *sessionRecord) deadline() (int64, bool) {
	if s.Online || s.Expiry == neverExpires || s.DisconnectedAt <= 0 {
		return 0, false
	}
	return s.DisconnectedAt + int64(s.Expiry)*1000, true
}

// expiryID is the expiry index's id for client expiring at deadline: ids
// sort by deadline, so the expirer reads only what is due. An entry may
// outlive its session's offline spell (the session came back, or expired
// with another deadline): the expirer checks the record and drops it.
func expiryID(deadline int64, client string) string {
	return fmt.Sprintf("%016x", uint64(deadline)) + slotSep + client
}

// discardSession deletes every piece of state of client: the session
// record, staged inbound QoS 2 messages, outbound QoS 2 state and completion
// marks. Used for clean start and session expiry.
func (b *Broker) discardSession(ctx context.Context, client string) error {
	tx, err := b.discardTx(ctx, client, false)
	if err != nil || tx == nil {
		return err
	}
	return tx.Commit(ctx)
}

// discardTx returns a transaction deleting every piece of state of
// client, or nil when there is none. With overwrite the session record
// is left out of the deletes (it is still counted as state): the caller
// writes the new session's record in the same transaction.
//
// A session with more rows than one transaction takes loses its
// completion marks, then its outbound and staged rows, in commits of
// Broker.maxStateDeletes before the returned transaction: the session record
// goes last, so a crash part way leaves a session that is discarded
// again, never rows that a new session of the same client id would adopt.
func (b *Broker) discardTx(ctx context.Context, client string, overwrite bool) (*table.Tx, error) {
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
		tx := b.db.Begin()
		for _, r := range rows[:chunk] {
			tx.DeleteState(r.table, r.id)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		rows = rows[chunk:]
	}
	tx := b.db.Begin()
	for _, r := range rows {
		tx.DeleteState(r.table, r.id)
	}
	n := len(rows)
	if r, err := b.db.Get(ctx, tableSessions, client); err == nil {
		if !overwrite {
			tx.DeleteState(tableSessions, client)
		}
		// The indexes go with the record; an overwrite puts new entries
		// after these deletes, in the same commit.
		var s sessionRecord
		if decodeSession(r.Value, &s) == nil {
			s.loaded()
			unindexSession(tx, client, &s)
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
// lazyEnds): maxLazyEnds, or an eighth of a smaller engine commit limit.
func (b *Broker) maxLazy() int {
	return max(1, min(maxLazyEnds, engine.MaxCommitEntries(b.db.Engine())/8))
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
	due := fmt.Sprintf("%016x", uint64(now.UnixMilli())) + "\xff"
	chunk := b.maxStateDeletes()
	var ids []string
	err := b.db.Range(ctx, tableExpiry, "", func(r table.Record) bool {
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
		_, client, _ := strings.Cut(id, slotSep)
		b.mu.Lock()
		_, online := b.conns[client]
		b.mu.Unlock()
		if !online {
			// loadSession discards a session whose expiry passed.
			if _, _, _, err := b.loadSessionAt(ctx, client, now); err != nil {
				return fmt.Errorf("expire session %q: %w", client, err)
			}
		}
		tx.DeleteStateUnchecked(tableExpiry, id)
	}
	return tx.Commit(ctx)
}

// indexExpiries writes the expiry index entries of offline sessions once,
// for a store written before the index existed.
func (b *Broker) indexExpiries(ctx context.Context) error {
	if _, err := b.db.Get(ctx, tableExpiry, expiryIndexed); err == nil {
		return nil
	}
	tx := b.db.Begin()
	n, chunk := 0, b.maxStateDeletes()
	err := b.db.Range(ctx, tableSessions, "", func(r table.Record) bool {
		var s sessionRecord
		if r.Deleted || decodeSession(r.Value, &s) != nil {
			return true
		}
		if d, ok := s.deadline(); ok {
			if tx.PutStateUnchecked(tableExpiry, expiryID(d, r.ID), nil) == nil {
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
	if err := tx.PutState(tableExpiry, expiryIndexed, nil); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// expiryIndexed marks a store whose expiry index is complete; it sorts
// after every deadline.
const expiryIndexed = "~indexed"
