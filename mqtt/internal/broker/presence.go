package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// Node presence, for takeover across nodes sharing one store.
//
// Each node rewrites its record in tableNodes every nodeBeat while it
// runs, with a value that changes each time. A claim on a session held by
// a node whose record then stays the same for nodeGone, measured on the
// claimer's own clock (so clocks of different machines need not agree),
// does not wait out Options.TakeoverTimeout for a hand-over that a dead
// node cannot give: the session is taken as it is, exactly as after the
// timeout. A node with no record (one that predates them) is waited for
// the whole timeout.
const (
	tableNodes = "mqtt.nodes" // id = node id; state only, never in the log
	nodeBeat   = 500 * time.Millisecond
	nodeGone   = 4 * nodeBeat
	// nodeRecover is how long a node's record must stay the same, while
	// this node has been reading and writing records all along, before
	// its sessions are recovered here (see recoverGoneNodes): longer than
	// nodeGone, since recovering the sessions of a node that is only
	// slow would publish its clients' wills while they are connected.
	nodeRecover = 20 * nodeBeat
)

// beat writes this node's presence record every nodeBeat until the broker
// closes. The record carries the node's start time and a counter, so each
// write differs from every earlier one, this run's or a previous run's.
// Beside it, in the same commit when they changed, goes the node's count
// of online members of each shared subscription (its shares record);
// after each write the node reads the others' records (see
// sharenodes.go). As the broker closes, its shares record goes.
func (b *Broker) beat() {
	defer b.wg.Done()
	t := time.NewTicker(nodeBeat)
	defer t.Stop()
	start := time.Now().UnixNano()
	seen := map[string]*presenceSeen{}
	recovered := map[string]string{}
	// observing is since when every write and read of the records has
	// succeeded: a node's record seen unchanged only counts from then.
	var observing time.Time
	// shares is the shares record as last written (nil: none); until
	// written is set, a record an earlier run of this node left (one that
	// crashed) may stand, and the first beat replaces it.
	var shares []byte
	written := false
	for n := uint64(1); ; n++ {
		next := b.encodeShares(b.router.Index().Shares())
		change := !written || !bytes.Equal(shares, next)
		err := b.writePresence(b.ctx, start, n, change, next)
		if err == nil {
			shares, written = next, true
		}
		now := time.Now()
		var view shareView
		if err == nil {
			view, err = b.readShareView(b.ctx, seen, now)
		}
		switch {
		case err != nil:
			observing = time.Time{}
			if b.ctx.Err() == nil {
				b.log.Debug("presence records not written or read", "err", err)
			}
		default:
			if observing.IsZero() {
				observing = now
			}
			b.setShareView(view)
			if now.Sub(observing) >= nodeRecover {
				b.recoverGoneNodes(seen, recovered, now)
			}
		}
		select {
		case <-b.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), nodeBeat)
			_ = b.writePresence(ctx, start, n+1, true, nil)
			cancel()
			return
		case <-t.C:
		}
	}
}

// writePresence writes this node's presence record for beat n, and with
// change its shares record (nil deletes it), in one commit, and waits for
// it up to nodeGone: a store that takes longer (a NATS leader change)
// fails the beat, and the next one tries again.
func (b *Broker) writePresence(ctx context.Context, start int64, n uint64, change bool, shares []byte) error {
	ctx, cancel := context.WithTimeout(ctx, nodeGone)
	defer cancel()
	tx := b.db.Begin()
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(start))
	if err := tx.PutStateUnchecked(tableNodes, b.opts.NodeID, binary.BigEndian.AppendUint64(v, n)); err != nil {
		return err
	}
	if change {
		id := b.opts.NodeID + sharesSuffix
		var err error
		if shares == nil {
			err = tx.DeleteStateUnchecked(tableNodes, id)
		} else {
			err = tx.PutStateUnchecked(tableNodes, id, shares)
		}
		if err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// nodeWatch tells, over successive looks, whether a node has stopped
// beating.
type nodeWatch struct {
	node  string
	last  []byte
	since time.Time // when last was first seen, on this node's clock
	seen  bool      // the node has a presence record
	next  time.Time // the next look
}

// gone reports whether w's node has kept the same presence record for
// nodeGone. It reads the record at most every nodeBeat/5.
func (w *nodeWatch) gone(ctx context.Context, db *table.DB, now time.Time) bool {
	if w.node == "" || now.Before(w.next) {
		return false
	}
	w.next = now.Add(nodeBeat / 5)
	rec, err := db.Get(ctx, tableNodes, w.node)
	if errors.Is(err, table.ErrNotFound) || err != nil {
		return false
	}
	if !w.seen || !bytes.Equal(rec.Value, w.last) {
		w.last, w.since, w.seen = rec.Value, now, true
		return false
	}
	return now.Sub(w.since) >= nodeGone
}

// recoverGoneNodes recovers the sessions of the nodes whose record has
// stayed the same for nodeRecover, as each would at its own restart (see recoverWills): those it
// left online go offline, and the wills of its clients are published when
// due, which without it waited for the node to start again, however long
// that took. One node does it, the live one with the lowest id, once per
// stop of a node; recovered maps each node recovered to its last
// presence record. A node that comes back beats again and may stop, and
// be recovered, again.
func (b *Broker) recoverGoneNodes(seen map[string]*presenceSeen, recovered map[string]string, now time.Time) {
	var gone []string
	lowest := b.opts.NodeID
	for id, ps := range seen {
		switch {
		case id == b.opts.NodeID:
		case now.Sub(ps.since) < nodeRecover:
			delete(recovered, id)
			lowest = min(lowest, id)
		case recovered[id] != string(ps.value):
			gone = append(gone, id)
		}
	}
	if lowest != b.opts.NodeID {
		return
	}
	for _, id := range gone {
		recovered[id] = string(seen[id].value)
		// Off the beat's goroutine: a recovery reads every session the
		// recovery index names, and this node must go on beating
		// meanwhile, or the others would take it for gone in turn.
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			n := b.recoverSessions(func(s *session.Record) bool { return s.Node == id })
			if n > 0 && b.ctx.Err() == nil {
				b.log.Info("node stopped beating: its sessions recovered here", "node", id, "sessions", n)
			}
		}()
	}
}

// nodeIDFree checks, before a node starts beating, that no running node
// has its id: two nodes with one id would each take the other's sessions
// for their own (see recoverWills). A record of the id that changes
// within a beat and a margin belongs to a running node; one that stays
// the same was left by a node that stopped, this one's own previous run
// most likely. A fresh id costs one read.
func nodeIDFree(ctx context.Context, db *table.DB, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*nodeBeat)
	defer cancel()
	first, err := db.Get(ctx, tableNodes, id)
	if errors.Is(err, table.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mqtt: read the presence record of node %q: %w", id, err)
	}
	select {
	case <-time.After(nodeBeat + nodeBeat/5):
	case <-ctx.Done():
		return fmt.Errorf("mqtt: read the presence record of node %q: %w", id, ctx.Err())
	}
	again, err := db.Get(ctx, tableNodes, id)
	if err != nil {
		return fmt.Errorf("mqtt: read the presence record of node %q: %w", id, err)
	}
	if !bytes.Equal(first.Value, again.Value) {
		return fmt.Errorf("mqtt: node id %q is in use by a running node (its presence record changes); "+
			"give each node its own id (tidemark serve --node-id, or a data directory of its own): %w", id, engine.ErrInvalidOption)
	}
	return nil
}
