package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// OfflineSession describes a persistent session to store without a
// connection (see AddOfflineSessions).
type OfflineSession struct {
	// ClientID names the session; it must not have one stored yet.
	ClientID string
	// Version is the protocol the session speaks (packet.V311 or
	// packet.V5).
	Version packet.Version
	// ExpirySeconds is the session expiry interval, counted from the
	// moment the session is stored; 0xFFFFFFFF never expires. A 3.1.1
	// persistent session that connects gets Options.SessionExpiry (a week
	// by default; never when it is negative). 0 is refused: such a
	// session ends with its connection and is never stored.
	ExpirySeconds uint32
	// Subscriptions are the session's subscriptions; their Client field
	// is ignored. A shared one has Group set and Filter without the
	// $share prefix, as topic.ParseShared returns it.
	Subscriptions []topic.Subscription
}

// ErrSessionExists is returned by AddOfflineSessions for a client id that
// already has a stored session.
var ErrSessionExists = errors.New("mqtt: a session is stored for this client id")

// provisionBatch is how many sessions AddOfflineSessions writes per
// commit: each takes up to four engine entries and one check, well within
// engine.MaxBatchEntries.
const provisionBatch = 1024

// AddOfflineSessions stores sessions as offline persistent sessions, each
// exactly as a client that connected with clean start false, made its
// subscriptions and disconnected at that moment would leave it: its
// checkpoint at the log's head (it receives the QoS 1 and 2 messages its
// subscriptions match that are published afterwards, when it reconnects)
// and its entries in the broker's indexes. It provisions a fleet, or
// loads one for a benchmark, without a connection per device. It writes
// to db directly, so it may run with or without a broker on db.
//
// Sessions go in commits of a few hundred; a client id that already has
// a session fails its commit with an error wrapping ErrSessionExists,
// and the commits before it stay.
func AddOfflineSessions(ctx context.Context, db *table.DB, sessions []OfflineSession) error {
	for i, s := range sessions {
		switch {
		case s.ClientID == "" || !utf8.ValidString(s.ClientID) || strings.Contains(s.ClientID, session.Sep):
			return fmt.Errorf("mqtt: offline session %d: client id %q: give a non-empty UTF-8 client id without U+0000", i, s.ClientID)
		case s.Version != packet.V311 && s.Version != packet.V5:
			return fmt.Errorf("mqtt: offline session %q: protocol version %d: use packet.V311 or packet.V5", s.ClientID, s.Version)
		case s.ExpirySeconds == 0:
			return fmt.Errorf("mqtt: offline session %q: session expiry 0 ends a session with its connection; give a positive expiry, or 0xFFFFFFFF for never", s.ClientID)
		}
		for _, sub := range s.Subscriptions {
			if !topic.ValidFilter(sub.Filter) || sub.QoS > 2 {
				return fmt.Errorf("mqtt: offline session %q: subscription %q at QoS %d: give a valid topic filter and a QoS of 0, 1 or 2", s.ClientID, sub.Filter, sub.QoS)
			}
		}
	}
	if err := markIndexedIfEmpty(ctx, db); err != nil {
		return err
	}
	head, err := db.Head(ctx)
	if err != nil {
		return fmt.Errorf("mqtt: offline sessions: %w", err)
	}
	for len(sessions) > 0 {
		n := min(len(sessions), provisionBatch)
		now := time.Now().UnixMilli()
		tx := db.Begin()
		for _, s := range sessions[:n] {
			rec := session.Record{Version: s.Version, Expiry: s.ExpirySeconds, DisconnectedAt: now, Checkpoint: logpos.One(head), SentHigh: logpos.One(head)}
			for _, sub := range s.Subscriptions {
				rec.Subs = append(rec.Subs, session.SubOf(sub))
			}
			if err := tx.ExpectAbsent(session.Table, s.ClientID); err != nil {
				return fmt.Errorf("mqtt: offline session %q: %w", s.ClientID, err)
			}
			if err := session.Put(tx, s.ClientID, &rec); err != nil {
				return fmt.Errorf("mqtt: offline session %q: %w", s.ClientID, err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			if errors.Is(err, engine.ErrConflict) {
				return fmt.Errorf("%w: one of %q..%q: %w", ErrSessionExists, sessions[0].ClientID, sessions[n-1].ClientID, err)
			}
			return fmt.Errorf("mqtt: offline sessions: %w", err)
		}
		sessions = sessions[n:]
	}
	return nil
}

// markIndexedIfEmpty writes the markers of the checkpoint, recovery and
// expiry indexes into a store that has no session yet, so a broker's
// first start does not read every session AddOfflineSessions wrote (they
// index themselves). A store with sessions and no marker keeps waiting
// for a broker to index it.
func markIndexedIfEmpty(ctx context.Context, db *table.DB) error {
	if _, err := db.Get(ctx, session.CheckpointTable, session.CheckpointsIndexed); err == nil {
		return nil
	}
	empty := true
	if err := db.Range(ctx, session.Table, "", func(table.Record) bool {
		empty = false
		return false
	}); err != nil {
		return fmt.Errorf("mqtt: offline sessions: %w", err)
	}
	if !empty {
		return nil
	}
	tx := db.Begin()
	if err := tx.PutStateUnchecked(session.CheckpointTable, session.CheckpointsIndexed, nil); err != nil {
		return err
	}
	if _, err := db.Get(ctx, session.ExpiryTable, session.ExpiryIndexed); err != nil {
		if err := tx.PutState(session.ExpiryTable, session.ExpiryIndexed, nil); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("mqtt: offline sessions: %w", err)
	}
	return nil
}
