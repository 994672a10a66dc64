package broker

import (
	"bytes"
	"context"
	"errors"
	"time"

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
)

// beat writes this node's presence record every nodeBeat until the broker
// closes. The record carries the node's start time and a counter, so each
// write differs from every earlier one, this run's or a previous run's,
// and the node's online members of each shared subscription; after each
// write the node reads the others' records (see sharenodes.go). The last
// record, as the broker closes, has no members.
func (b *Broker) beat() {
	defer b.wg.Done()
	t := time.NewTicker(nodeBeat)
	defer t.Stop()
	start := time.Now().UnixNano()
	seen := map[string]*presenceSeen{}
	for n := uint64(1); ; n++ {
		b.writePresence(b.ctx, appendPresence(nil, start, n, b.router.Index().Shares()))
		if view, err := b.readShareView(b.ctx, seen, time.Now()); err == nil {
			b.setShareView(view)
		} else if b.ctx.Err() == nil {
			b.log.Debug("presence records not read", "err", err)
		}
		select {
		case <-b.ctx.Done():
			ctx, cancel := context.WithTimeout(context.Background(), nodeBeat)
			b.writePresence(ctx, appendPresence(nil, start, n+1, nil))
			cancel()
			return
		case <-t.C:
		}
	}
}

// writePresence writes v as this node's presence record.
func (b *Broker) writePresence(ctx context.Context, v []byte) {
	tx := b.db.Begin()
	_ = tx.PutStateUnchecked(tableNodes, b.opts.NodeID, v)
	if _, err := tx.Submit(ctx); err != nil && ctx.Err() == nil {
		b.log.Debug("presence record not written", "err", err)
	}
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
