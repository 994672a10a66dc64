package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// The store side of a CONNECT: the previous session discarded or loaded,
// the session record written, the sending side restored. It runs on a
// store goroutine (see onStore), as one sequence of store calls.

// sessionSetup is what the store calls of a CONNECT found and started.
type sessionSetup struct {
	// present says the session existed; settled that nothing the CONNECT
	// changed must be durable before its CONNACK (see connectAck).
	present, settled bool
	// h is the commit of the session record; nil when the SUBSCRIBE
	// behind the CONNECT writes it (see subscribeFollows).
	h   *engine.Handle
	out *delivery.Session
	// head is the log head read for the CONNECT.
	head logpos.Vec
}

// setupSession discards the previous session (clean start) or loads it,
// submits the session record and restores the sending side: the store
// calls of a CONNECT (see onStore). An error is logged here; the CONNECT
// is refused.
func (c *conn) setupSession(ctx context.Context, cleanStart bool, window int) (sessionSetup, error) {
	fail := func(msg string, err error) (sessionSetup, error) {
		c.log.Error(msg, "err", err)
		return sessionSetup{}, err
	}
	present := false
	var rows delivery.Restored
	// tx writes the session record; under a clean start it first deletes
	// what the previous session left, in the same commit.
	var tx *table.Tx
	// Brokers sharing the store (a node id) find a session's holder from
	// its record: it must be committed before the CONNACK, or a CONNECT
	// on another node right after it would not see this one to take it
	// over.
	settled := c.will == nil && c.b.opts.NodeID == ""
	if cleanStart {
		dtx, err := c.b.storeFor(c.client).DiscardTx(ctx, c.client, session.DiscardOptions{Overwrite: true})
		if err != nil {
			return fail("discard session", err)
		}
		if dtx != nil {
			tx, settled = dtx, false
		}
		c.rowless = true // the discard takes every row with the record
	} else {
		// A session's rows go before its record (see discardTx): with no
		// record there are none to read. The rows must be those of the
		// record read: a commit landing between the two reads (a late
		// one of a node that held the session and died) could have moved
		// the checkpoint and swept the completion marks below it, and a
		// resume from the older checkpoint without those marks would
		// deliver again QoS 2 messages the subscriber completed.
		settledAbsent := settled
		for attempt := 1; ; attempt++ {
			rec, ver, ok, err := c.b.storeFor(c.client).Load(ctx, c.client)
			if err != nil {
				return fail("load session", err)
			}
			if !ok {
				// Absent, possibly only since an earlier attempt read it.
				present, settled, c.rec = false, settledAbsent, session.Record{}
				c.rowless = true
				break
			}
			present, settled = true, false
			c.rec = rec
			c.b.at(PointSessionRead, c.client, 0)
			if rec.Rowless && !c.b.sharedStore() {
				// Left offline with no rows, and none written since: only
				// a connection holding the session writes them, and its
				// first write clears the flag (see stampRecord).
				c.stagedBefore, c.rowless = nil, true
				break
			}
			var same bool
			if rows, same, err = c.loadRows(ctx, ver); err != nil {
				return fail("load session state", err)
			}
			if same {
				if c.log.Enabled(slog.LevelDebug) {
					c.log.Debug("session loaded", "checkpoint", c.rec.Checkpoint.String(), "sent_high", c.rec.SentHigh.String(), "next_pi", c.rec.NextPI,
						"held_by", c.rec.Node, "online", c.rec.Online, "qos2_in_flight", len(rows.Out), "qos2_completed_above_checkpoint", len(rows.Done))
				}
				c.rowless = len(rows.Out) == 0 && len(rows.Done) == 0 && len(c.stagedBefore) == 0
				break
			}
			if attempt == session.MaxLoadAttempts {
				return fail("load session state", fmt.Errorf("mqtt: session %q changed while it was read, %d times: %w", c.client, attempt, engine.ErrConflict))
			}
			c.stagedBefore = nil
		}
	}
	// Whether a SUBSCRIBE waits behind the CONNECT is read before the
	// head: it was received before the head was taken, so the head can be
	// where its subscriptions start too (see handleSubscribe).
	// A record saying the session has no rows is overwritten before any
	// packet behind the CONNECT can write one: the SUBSCRIBE that would
	// write it instead commits on a store goroutine of its own.
	follows := tx == nil && !c.rec.Rowless && c.subscribeFollows()
	head, err := c.b.head(ctx)
	if err != nil {
		return fail("connect: log head", err)
	}
	c.stampRecord(head, present)
	var h *engine.Handle
	if !follows {
		if tx == nil {
			tx = c.db.Begin()
		}
		if err := session.Put(tx, c.client, &c.rec); err != nil {
			return fail("persist session", err)
		}
		// Submitted, not waited for: the read loop goes on to the packets
		// behind the CONNECT, so a packet sent with it commits in the
		// same sync, and the CONNACK waits in the FIFO when it must.
		if h, err = tx.Submit(ctx); err != nil {
			return fail("persist session", err)
		}
	}
	var restored *delivery.Restored
	if present {
		restored = &rows
	}
	out := delivery.New(c.b.deliv, (*sessionConn)(c), c.client, &c.rec, window, head, restored)
	return sessionSetup{present: present, settled: settled, h: h, out: out, head: head}, nil
}

// loadRows reads a present session's rows from one view of the store, so
// a reconnect pays one engine snapshot for them rather than one per
// table, if that view still holds the session record at version ver
// (same); otherwise it reads nothing. The packet ids of its staged inbound QoS 2 messages go to
// c.stagedBefore: a first transmission on one of them finds its slot
// taken, so its staging must not share a commit with others (see group).
func (c *conn) loadRows(ctx context.Context, ver table.Version) (rows delivery.Restored, same bool, err error) {
	prefix := c.client + slotSep
	err = c.db.View(ctx, func(v *table.View) error {
		r, err := v.Get(session.Table, c.client)
		if err != nil || r.Version != ver {
			// Gone or rewritten since it was read: read both again.
			if errors.Is(err, table.ErrNotFound) {
				err = nil
			}
			return err
		}
		same = true
		err = v.Range(tableStaged, prefix, func(r table.Record) bool {
			if pi, perr := strconv.ParseUint(r.ID[len(prefix):], 10, 16); !r.Deleted && perr == nil {
				if c.stagedBefore == nil {
					c.stagedBefore = map[uint16]bool{}
				}
				c.stagedBefore[uint16(pi)] = true
			}
			return true
		})
		if err != nil {
			return err
		}
		err = v.Range(tableOut, prefix, func(r table.Record) bool {
			if !r.Deleted {
				rows.Out = append(rows.Out, bytes.Clone(r.Value))
			}
			return true
		})
		if err != nil {
			return err
		}
		return v.Range(tableDone, prefix, func(r table.Record) bool {
			if r.Deleted {
				return true
			}
			if pos, err := logpos.ParsePos(r.ID[len(prefix):]); err == nil {
				rows.Done = append(rows.Done, pos)
			}
			return true
		})
	})
	return rows, same, err
}

// stampRecord makes the session record this connection's, as the store
// must hold it while the connection lasts: online, on this node under
// this connection's token (what a takeover from another node looks for),
// with the connection's version, expiry and will. A session that was not
// present starts at head, the log head read for the CONNECT.
func (c *conn) stampRecord(head logpos.Vec, present bool) {
	if !present {
		// A new session receives what is published after its CONNACK.
		c.rec = session.Record{Checkpoint: head, SentHigh: head}
	}
	c.rec.Version = c.version
	c.rec.Expiry = c.expiry
	c.rec.Online = true
	c.rec.Rowless = false // this connection may write rows from now on
	c.rec.Node, c.rec.Conn, c.rec.Claimed = c.b.opts.NodeID, c.token, false
	c.rec.DisconnectedAt = 0
	c.rec.Will = nil
	if c.will != nil {
		enc, _ := c.will.MarshalBinary()
		c.rec.Will = &session.Will{Msg: enc, Delay: c.willDelay}
	}
}
