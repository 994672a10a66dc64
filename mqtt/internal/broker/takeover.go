package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// Session takeover across brokers sharing one store (Options.NodeID).
//
// A CONNECT whose client id is online on another node claims the session:
// it writes the session record as its own with Claimed set, conditional
// on the version it read, and in the same commit appends a message to
// tableTakeover. Every node follows that table; the node holding the
// connection the claim names (the record's, at the version the claim was
// conditional on) closes it (DISCONNECT 0x8E under 5.0), stops its
// pipelines, and hands the session over: it writes its final session
// state (checkpoint, subscriptions, packet ids) under the claimer's
// ownership with Claimed cleared, or removes the session when it ended
// with its connection, conditional on the claim still standing. The
// claimer waits for that hand-over (up to Options.TakeoverTimeout) before
// it reads the session and sends its CONNACK, so the old connection is
// closed first and the new one starts from the old one's final state.
// A node that does not answer (it crashed, or is stuck) is passed over
// after the timeout, or sooner once its presence record stopped changing
// (see presence.go); its own later session writes then fail their
// condition or find the claim answered, and change nothing.

// tableTakeover carries takeover claims: id = client id, message = the
// claiming connection's token, a space and the token of the connection it
// claims the session from (see claimMessage).
const tableTakeover = "mqtt.takeover"

// claimMessage is the tableTakeover message of a claim by claimer of the
// session that connection victim holds.
func claimMessage(claimer, victim string) []byte {
	return []byte(claimer + " " + victim)
}

// parseClaim splits a tableTakeover message. A claim written by an
// earlier version names no victim: victim is "".
func parseClaim(msg []byte) (claimer, victim string) {
	claimer, victim, _ = strings.Cut(string(msg), " ")
	return claimer, victim
}

// endedBy reports whether a claim ends c. A claim names the connection
// whose record it was conditional on, so it ends that connection only:
// the follower may read it late, after that connection was replaced on
// this node by a newer one (which took the session over itself, or was
// handed it by another node), and ending the newer one for an old claim
// would close a client that nobody took over, and hand its session to a
// claimer that stopped waiting long ago. A claim without a victim (from
// an earlier version) ends any connection but the claimer's.
func (c *conn) endedBy(claimer, victim string) bool {
	if victim != "" {
		return c.token == victim
	}
	return c.token != claimer
}

func newToken() string {
	var r [9]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// claimSession takes the client's session over from a connection on
// another node and waits until that node handed it over.
func (c *conn) claimSession(ctx context.Context) {
	b := c.b
	if b.opts.NodeID == "" {
		return
	}
	deadline := time.Now().Add(b.opts.TakeoverTimeout)
	claimed := false
	var holder nodeWatch
	for {
		rec, ver, ok, err := b.storeFor(c.client).Load(ctx, c.client)
		switch {
		case err != nil:
			return
		case claimed && !ok:
			return // handed over by removal: the session ended with its connection
		case ok && rec.Conn == c.token:
			if !rec.Claimed {
				return // handed over
			}
		case !ok || !rec.Online || rec.Node == b.opts.NodeID || rec.Node == "":
			// Absent, offline, left online by a crash of a broker with
			// this node id (its connections are gone), or by a broker
			// that takes no part in cross-node takeover: nothing to take
			// over, as far as this node has seen. Another node's commit
			// may not have reached this one yet, so confirm what was read
			// with the store before relying on it.
			tx := c.db.Begin()
			if ok {
				tx.ExpectVersion(session.Table, c.client, ver)
			} else {
				tx.ExpectAbsent(session.Table, c.client)
			}
			err := tx.Commit(ctx)
			if err == nil {
				return
			}
			if !errors.Is(err, engine.ErrConflict) {
				c.log.Warn("check session owner", "err", err)
				return
			}
		default:
			// Online on another node (or that node overwrote the claim
			// before it saw it): claim it.
			claim := rec
			claim.Node, claim.Conn, claim.Claimed, claim.Online = b.opts.NodeID, c.token, true, true
			claim.Rowless = false
			tx := c.db.Begin()
			tx.ExpectVersion(session.Table, c.client, ver)
			if err := session.Put(tx, c.client, &claim); err != nil {
				return
			}
			tx.Message(tableTakeover, c.client, claimMessage(c.token, rec.Conn))
			switch err := tx.Commit(ctx); {
			case err == nil:
				claimed = true
				if holder.node != rec.Node {
					holder = nodeWatch{node: rec.Node}
				}
			case !errors.Is(err, engine.ErrConflict):
				c.log.Warn("claim session", "err", err)
				return
			}
		}
		now := time.Now()
		if now.After(deadline) {
			c.log.Warn("the node holding the session did not hand it over; taking it as it is", "node", rec.Node)
			return
		}
		if claimed && holder.gone(ctx, b.db, now) {
			c.log.Warn("the node holding the session stopped beating; taking the session as it is", "node", holder.node, "silent", now.Sub(holder.since).Round(time.Millisecond))
			return
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// onOtherNode reports whether s was written by a connection on another
// node sharing the store.
func (b *Broker) onOtherNode(s session.Record) bool {
	return b.opts.NodeID != "" && s.Node != b.opts.NodeID
}

// followTakeovers closes this node's connections whose session another
// node claimed: a claim is in the partition of the session it claims,
// and one follower reads each partition.
func (b *Broker) followTakeovers() {
	defer b.wg.Done()
	for i := 1; i < b.parts.Count(); i++ {
		b.wg.Add(1)
		go func(db *table.DB) {
			defer b.wg.Done()
			b.followTakeoversIn(db)
		}(b.parts.DB(i))
	}
	b.followTakeoversIn(b.db)
}

// followTakeoversIn is followTakeovers on one partition, db.
func (b *Broker) followTakeoversIn(db *table.DB) {
	for b.ctx.Err() == nil {
		head, err := db.Head(b.ctx)
		if err == nil {
			_, err = db.Follow(b.ctx, table.SubscribeOptions{Table: tableTakeover, Start: head, IncludeSuperseded: true},
				func(ev table.Event) error {
					claimer, victim := parseClaim(ev.Value)
					b.mu.Lock()
					c := b.conns[ev.ID]
					b.mu.Unlock()
					if c != nil && c.endedBy(claimer, victim) {
						go c.takeoverRemote(claimer)
					}
					return nil
				})
		}
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("takeover follower restarts", "err", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// takeoverRemote ends the connection because a connection on another node
// claimed its session; teardown hands the session over to token.
func (c *conn) takeoverRemote(token string) {
	c.handoff.Store(&token)
	c.takenOver.Store(true)
	c.disconnect(packet.SessionTakenOver, "session taken over")
}

// handOff writes this connection's final session state under the claim
// of token, or removes the session when it ends with the connection,
// conditional on the claim still standing (retried while this node's own
// late writes race it).
func (c *conn) handOff(ctx context.Context, token string) error {
	b := c.b
	for range 5 {
		rec, ver, ok, err := b.storeFor(c.client).Load(ctx, c.client)
		if err != nil {
			return err
		}
		// The claim stands, or this connection's own last checkpoint
		// write replaced it before the takeover reached it (the claimer
		// then claims again, or takes this hand-over); anything else means
		// the claimer gave up waiting and moved on.
		if !ok || !(rec.Conn == token && rec.Claimed || rec.Conn == c.token) {
			return nil
		}
		var tx *table.Tx
		if c.expiry == 0 {
			tx, err = b.storeFor(c.client).DiscardTx(ctx, c.client, session.DiscardOptions{IfVersion: ver})
			if err == nil && tx == nil {
				return nil // gone since the read above: nothing to hand over
			}
			if err != nil && !errors.Is(err, engine.ErrConflict) {
				return err
			}
		} else {
			c.rec.Online, c.rec.Node, c.rec.Conn, c.rec.Claimed = true, rec.Node, token, false
			c.rec.Will, c.rec.DisconnectedAt, c.rec.Expiry = nil, 0, c.expiry
			if tx, err = c.out.SessionTx(); err != nil {
				return err
			}
			tx.ExpectVersion(session.Table, c.client, ver)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if !errors.Is(err, engine.ErrConflict) {
			if err == nil {
				// The will goes now or never: a delayed one is cancelled
				// by the new connection, which is not on this node.
				err = c.publishWillNow(ctx)
				c.sendWill = false
			}
			return err
		}
	}
	return fmt.Errorf("mqtt: hand session over: %w", engine.ErrConflict)
}

// publishWillNow publishes the will of a connection taken over from
// another node when its delay is 0, as a takeover on one node does
// [MQTT-3.1.4-3]; a delayed one is cancelled by the new connection.
func (c *conn) publishWillNow(ctx context.Context) error {
	m := c.will
	if m == nil || !c.sendWill || c.willDelay > 0 || m.Expired(time.Now()) {
		return nil
	}
	// A QoS 0 will reaches the other nodes through the log (see
	// publishQoS0).
	logged := m.QoS > 0 || c.b.sharedStore()
	if logged || m.Retain {
		tx := c.db.Begin()
		var err error
		if logged {
			err = c.b.addMessage(tx, m)
		} else {
			enc, merr := m.MarshalBinary()
			if err = merr; err == nil {
				err = c.b.addRetained(tx, m, enc)
			}
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			return fmt.Errorf("mqtt: publish will: %w", err)
		}
	}
	if !logged {
		c.b.fanout(m, fanoutOpts{})
	}
	return nil
}
