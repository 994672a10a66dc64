package mqtt

import (
	"encoding/json"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// pendingWill is a will waiting for its delay (5.0 will delay interval).
type pendingWill struct{ timer *time.Timer }

// scheduleWill publishes client's will after delay, unless the client
// reconnects first [MQTT-3.1.3-9].
func (b *Broker) scheduleWill(client string, m *Message, delay time.Duration) {
	if delay <= 0 {
		if err := b.publishServer(b.ctx, m); err != nil {
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
		if err := b.publishServer(b.ctx, m); err != nil && b.ctx.Err() == nil {
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

// recoverWills publishes the wills of sessions a crashed broker left
// online: their connections ended without a DISCONNECT.
func (b *Broker) recoverWills() {
	var recs []struct {
		id  string
		rec sessionRecord
	}
	_ = b.db.Range(b.ctx, tableSessions, "", func(r table.Record) bool {
		var s sessionRecord
		if !r.Deleted && json.Unmarshal(r.Value, &s) == nil && s.Online {
			recs = append(recs, struct {
				id  string
				rec sessionRecord
			}{r.ID, s})
		}
		return true
	})
	for _, r := range recs {
		tx := b.db.Begin()
		if r.rec.Expiry == 0 {
			tx.DeleteState(tableSessions, r.id)
		} else {
			r.rec.Online = false
			r.rec.DisconnectedAt = time.Now().UnixMilli()
			w := r.rec.Will
			r.rec.Will = nil
			if err := putSession(tx, r.id, &r.rec); err != nil {
				continue
			}
			r.rec.Will = w
		}
		if err := tx.Commit(b.ctx); err != nil {
			b.log.Warn("recover session", "client", r.id, "err", err)
			continue
		}
		if r.rec.Will != nil {
			var m Message
			if m.UnmarshalBinary(r.rec.Will.Msg) == nil {
				b.scheduleWill(r.id, &m, time.Duration(min(r.rec.Will.Delay, r.rec.Expiry))*time.Second)
			}
		}
	}
}
