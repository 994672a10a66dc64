package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// pendingWill is a will waiting for its delay (5.0 will delay interval).
type pendingWill struct{ timer *time.Timer }

// A will that is due is also kept in its session record (Will) until it
// is published, so a broker that stops or crashes before the delay passed
// publishes it after its restart; publishWill drops that copy in the same
// commit that publishes the will, so a restart never publishes it twice.

// scheduleWill publishes client's will after delay, unless the client
// reconnects first [MQTT-3.1.3-9].
func (b *Broker) scheduleWill(client string, m *Message, delay time.Duration) {
	if delay <= 0 {
		if err := b.publishWill(b.ctx, client, m); err != nil && b.ctx.Err() == nil {
			b.log.Warn("publish will", "client", client, "err", err)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old := b.wills[client]; old != nil {
		old.timer.Stop()
	}
	b.wills[client] = &pendingWill{timer: time.AfterFunc(delay, func() {
		b.mu.Lock()
		delete(b.wills, client)
		b.mu.Unlock()
		if b.ctx.Err() != nil {
			return // stopping: the session record keeps the will for the next start
		}
		if err := b.publishWill(b.ctx, client, m); err != nil && b.ctx.Err() == nil {
			b.log.Warn("publish will", "client", client, "err", err)
		}
	})}
}

// cancelWill drops a delayed will of client that has not fired.
func (b *Broker) cancelWill(client string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.wills[client]; w != nil {
		w.timer.Stop()
		delete(b.wills, client)
	}
}

// publishWill publishes client's will and, in the same commit, drops the
// copy its offline session record keeps. A client that reconnected in the
// meantime rewrote the record: the commit then fails its version check and
// the will is not published, as the reconnect cancels it.
func (b *Broker) publishWill(ctx context.Context, client string, m *Message) error {
	rec, ver, ok, err := b.storeFor(client).Load(ctx, client)
	if err != nil {
		return err
	}
	if ok && rec.Online {
		return nil // the client is back
	}
	if ok && rec.Will == nil {
		// Published already (by another node that scheduled it too, see
		// recoverGoneNodes), or cancelled: the record keeps a will until
		// it is published.
		return nil
	}
	// The will's owner's partition: the message is its publisher's.
	tx := b.dbFor(client).Begin()
	writes := false
	if ok && rec.Will != nil {
		writes = true
		rec.Will = nil
		if err := tx.ExpectVersion(session.Table, client, ver); err != nil {
			return err
		}
		if err := session.Put(tx, client, &rec); err != nil {
			return err
		}
	}
	live := !m.Expired(time.Now())
	// A QoS 0 will reaches the other nodes through the log (see
	// publishQoS0).
	logged := m.QoS > 0 || b.sharedStore()
	if live && (logged || m.Retain) {
		writes = true
		if logged {
			err = b.addMessage(tx, m)
		} else if enc, merr := m.MarshalBinary(); merr != nil {
			err = merr
		} else {
			err = b.addRetained(tx, m, enc)
		}
		if err != nil {
			return err
		}
	}
	// A QoS 0 will that is not retained, of a session keeping no copy,
	// stores nothing.
	if writes {
		if err := tx.Commit(ctx); err != nil {
			if errors.Is(err, engine.ErrConflict) {
				return nil // the client reconnected first
			}
			return fmt.Errorf("mqtt: publish will: %w", err)
		}
	}
	if live && !logged {
		b.fanout(m, fanoutOpts{})
	}
	return nil
}

// recoverWills schedules the wills a stopped broker left due: those of
// sessions it left online (it crashed: their connections ended without a
// DISCONNECT) and those still waiting for their delay, with what remains
// of it. It reads the sessions the recovery index names, not every stored
// session (see session.RecoverTable).
func (b *Broker) recoverWills() {
	// A session online on another node sharing the store is live there.
	b.recoverSessions(func(s *session.Record) bool { return !(s.Online && b.onOtherNode(*s)) })
}

// recoverSessions recovers the sessions of the recovery index that need
// it and that take accepts: one left online is marked offline (or
// removed, without expiry), and a will is scheduled for when it is due.
// It reports how many it recovered. A session whose record changes
// meanwhile is left to whoever changed it, and a will is published once
// however many nodes schedule it (see publishWill).
func (b *Broker) recoverSessions(take func(*session.Record) bool) int {
	type found struct {
		id  string
		rec session.Record
		ver table.Version
	}
	var ids []string
	_ = b.rangeAll(b.ctx, session.RecoverTable, "", func(_ int, r table.Record) bool {
		ids = append(ids, r.ID)
		return true
	})
	var recs []found
	for _, id := range ids {
		r, err := b.dbFor(id).Get(b.ctx, session.Table, id)
		if err != nil {
			continue
		}
		var s session.Record
		if session.Decode(r.Value, &s) == nil && s.NeedsRecovery() && take(&s) {
			s.Loaded()
			recs = append(recs, found{id, s, r.Version})
		}
	}
	now := time.Now()
	n := 0
	for _, r := range recs {
		if r.rec.Online {
			// Conditional on the record read: one that changed since was
			// written by a connection that holds the session now (on
			// another node, or on this one already), and writing back
			// what was read would put its state back to an older one.
			tx := b.dbFor(r.id).Begin()
			tx.ExpectVersion(session.Table, r.id, r.ver)
			if r.rec.Expiry == 0 {
				tx.DeleteState(session.Table, r.id)
				session.Unindex(tx, r.id, &r.rec)
			} else {
				r.rec.Online = false
				r.rec.DisconnectedAt = now.UnixMilli()
				if err := session.Put(tx, r.id, &r.rec); err != nil {
					continue
				}
			}
			if err := tx.Commit(b.ctx); errors.Is(err, engine.ErrConflict) {
				b.log.Debug("recover session: it changed since it was read; left to its holder", "client", r.id)
				continue
			} else if err != nil {
				b.log.Warn("recover session", "client", r.id, "err", err)
				continue
			}
		}
		n++
		if r.rec.Will == nil {
			continue
		}
		var m Message
		if m.UnmarshalBinary(r.rec.Will.Msg) != nil {
			continue
		}
		due := time.UnixMilli(r.rec.DisconnectedAt).Add(time.Duration(min(r.rec.Will.Delay, r.rec.Expiry)) * time.Second)
		if r.rec.Expiry == 0 {
			due = now
		}
		b.scheduleWill(r.id, &m, due.Sub(now))
	}
	return n
}

// willMessage converts a CONNECT's will into a message.
func willMessage(client string, w *packet.Will) *Message {
	m := &Message{Topic: w.Topic, Payload: append([]byte{}, w.Payload...), QoS: byte(w.QoS), Retain: w.Retain, From: client}
	setMessageProps(m, &w.Properties, time.Now())
	return m
}
