package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// SessionInfo describes one stored session, for operators.
type SessionInfo struct {
	ClientID string `json:"client_id"`
	// Online is true when the session was connected when last persisted (a
	// stopped broker leaves none online after a clean shutdown).
	Online         bool      `json:"online"`
	Protocol       string    `json:"protocol"`
	ExpirySeconds  uint32    `json:"expiry_seconds"`
	DisconnectedAt time.Time `json:"disconnected_at,omitzero"`
	// Checkpoint is the session's acknowledged position, one cursor per
	// partition of the message log (one, unless the log is split).
	Checkpoint    table.Cursors `json:"checkpoint"`
	Subscriptions []string      `json:"subscriptions"`
	// OutboundQoS2 counts QoS 2 messages sent to the client and not yet
	// completed; StagedQoS2 counts inbound QoS 2 messages received and not
	// yet released.
	OutboundQoS2 int  `json:"outbound_qos2"`
	StagedQoS2   int  `json:"staged_qos2"`
	HasWill      bool `json:"has_will"`
	// Rowless is true when the connection that left the session offline
	// left no QoS 2 state of it in the store, so a reconnect reads none.
	Rowless bool `json:"rowless,omitempty"`
	// Will is the will message the session holds, if any.
	Will *Message `json:"-"`
	// Node and Conn name the broker node and the connection that held
	// the session when it was last written.
	Node string `json:"node,omitempty"`
	Conn string `json:"conn,omitempty"`
	// Version is the session record's version: every write changes it.
	Version table.Version `json:"version"`
}

// SessionOf returns the stored session of client; ok is false when there
// is none.
func SessionOf(ctx context.Context, db *table.DB, client string) (_ SessionInfo, ok bool, _ error) {
	r, err := db.Get(ctx, session.Table, client)
	if errors.Is(err, table.ErrNotFound) {
		return SessionInfo{}, false, nil
	}
	if err != nil {
		return SessionInfo{}, false, err
	}
	var s session.Record
	if err := session.Decode(r.Value, &s); err != nil {
		return SessionInfo{}, false, fmt.Errorf("session %q: %w", client, err)
	}
	si := infoOf(r, &s)
	for t, n := range map[string]*int{session.OutTable: &si.OutboundQoS2, session.StagedTable: &si.StagedQoS2} {
		err := db.Range(ctx, t, client+session.Sep, func(r table.Record) bool {
			if !r.Deleted && strings.LastIndex(r.ID, session.Sep) == len(client) {
				*n++
			}
			return true
		})
		if err != nil {
			return SessionInfo{}, false, err
		}
	}
	return si, true, nil
}

// infoOf is the SessionInfo of the stored record r, decoded into s, less
// its QoS 2 counts.
func infoOf(r table.Record, s *session.Record) SessionInfo {
	si := SessionInfo{ClientID: r.ID, Online: s.Online, Protocol: s.Version.String(), ExpirySeconds: s.Expiry,
		Checkpoint: s.Checkpoint.Cursors(), HasWill: s.Will != nil, Rowless: s.Rowless, Node: s.Node, Conn: s.Conn, Version: r.Version}
	if s.Will != nil {
		var m Message
		if m.UnmarshalBinary(s.Will.Msg) == nil {
			si.Will = &m
		}
	}
	if s.DisconnectedAt > 0 {
		si.DisconnectedAt = time.UnixMilli(s.DisconnectedAt).UTC()
	}
	for _, sub := range s.Subs {
		si.Subscriptions = append(si.Subscriptions, sub.Subscription(r.ID).FullFilter()+" qos"+string('0'+sub.QoS))
	}
	return si
}

// Sessions lists the sessions stored in db, by client id. It holds them
// all; EachSession visits a store of any size one session at a time.
func Sessions(ctx context.Context, db *table.DB) ([]SessionInfo, error) {
	var out []SessionInfo
	err := EachSession(ctx, db, func(si SessionInfo) bool {
		out = append(out, si)
		return true
	})
	return out, err
}

// EachSession calls fn with each session stored in db, by client id,
// until fn returns false. It holds one session at a time, and counts of
// the QoS 2 exchanges in flight.
func EachSession(ctx context.Context, db *table.DB, fn func(SessionInfo) bool) error {
	count := func(t string) (map[string]int, error) {
		m := map[string]int{}
		err := db.Range(ctx, t, "", func(r table.Record) bool {
			if !r.Deleted {
				if i := strings.LastIndex(r.ID, session.Sep); i >= 0 {
					m[r.ID[:i]]++
				}
			}
			return true
		})
		return m, err
	}
	outN, err := count(session.OutTable)
	if err != nil {
		return err
	}
	staged, err := count(session.StagedTable)
	if err != nil {
		return err
	}
	return db.Range(ctx, session.Table, "", func(r table.Record) bool {
		var s session.Record
		if r.Deleted || session.Decode(r.Value, &s) != nil {
			return true
		}
		si := infoOf(r, &s)
		si.OutboundQoS2, si.StagedQoS2 = outN[r.ID], staged[r.ID]
		return fn(si)
	})
}
