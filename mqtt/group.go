package mqtt

import (
	"context"
	"errors"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// maxGroup bounds the packets whose writes share one commit.
const maxGroup = 256

// group is the read loop's pending commit: the writes without
// preconditions of consecutive packets that arrived together (QoS 1
// messages, outbound QoS 2 state), with the acknowledgements that wait for
// them. One commit instead of one per packet keeps the store's per-commit
// cost off each message when a client pipelines.
//
// The read loop submits the group before it would wait for the next
// packet, before any other commit or acknowledgement of its own (so
// commits and acknowledgements keep packet order), and when it is full.
//
// The stagings of new QoS 2 PUBLISHes (first write wins: a check each) go
// in groups of their own (checked). When one check fails nothing of the
// group applied, and each staging is then committed on its own, in order,
// so only those whose checks fail see the conflict; each has a handle of
// its own for that. Stagings commit no log entry, so redoing them after
// later commits changes no order anyone sees. Other checked writes
// (releases, session records) are never grouped.
type group struct {
	tx      *table.Tx
	entries []ackEntry
	checked bool
	parts   []checkedPart // with checked: one per entry
}

// checkedPart is one write of a checked group: how to redo it alone, and
// what learns of the commit that applied it.
type checkedPart struct {
	write func(tx *table.Tx) error
	// bind receives the part's own handle at submission; applied the
	// version of the commit that applied the write, before the handle
	// completes.
	bind    func(h *engine.Handle)
	applied func(v table.Version)
}

// later adds write to the pending group and queues e for when the group's
// commit completes. Read loop only. False means the connection is ending.
func (c *conn) later(write func(tx *table.Tx) error, e ackEntry) bool {
	if c.grp.checked && !c.flushGroup() {
		return false
	}
	if c.grp.tx == nil {
		c.grp.tx = c.b.db.Begin()
	}
	if err := write(c.grp.tx); err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	c.grp.entries = append(c.grp.entries, e)
	if c.groupFull() {
		return c.flushGroup()
	}
	return true
}

// laterChecked adds a checked write (a QoS 2 staging) to a checked group
// (see group). Read loop only. False means the connection is ending.
func (c *conn) laterChecked(part checkedPart, e ackEntry) bool {
	if c.grp.tx != nil && !c.grp.checked && !c.flushGroup() {
		return false
	}
	if c.grp.tx == nil {
		c.grp.tx, c.grp.checked = c.b.db.Begin(), true
	}
	if err := part.write(c.grp.tx); err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	c.grp.entries = append(c.grp.entries, e)
	c.grp.parts = append(c.grp.parts, part)
	if c.groupFull() {
		return c.flushGroup()
	}
	return true
}

// groupFull reports whether the pending group should go now: at the
// broker's group size, or when its acknowledgements would fill the FIFO,
// so that a stalled store holds back the read loop at the same depth as
// without groups.
func (c *conn) groupFull() bool {
	n := len(c.grp.entries)
	return n >= c.b.group || n >= cap(c.acks)-len(c.acks)
}

// flushGroup submits the pending group and queues its acknowledgements.
// Read loop only.
func (c *conn) flushGroup() bool {
	if c.grp.tx == nil {
		return true
	}
	g := c.grp
	c.grp = group{entries: c.grp.entries[:0]}
	if g.checked {
		c.grp.entries = nil // the resolver keeps g's
	}
	h, err := c.submitNow(g.tx)
	if err != nil {
		return false
	}
	if g.checked {
		completes := make([]func(engine.Result, error), len(g.parts))
		for i, p := range g.parts {
			var ph *engine.Handle
			ph, completes[i] = engine.NewHandle()
			g.entries[i].h = ph
			if p.bind != nil {
				p.bind(ph)
			}
		}
		go c.resolve(h, g.tx.Version(), g.parts, completes)
	}
	for _, e := range g.entries {
		if !g.checked {
			e.h = h
		}
		if !c.push(e) {
			return false
		}
	}
	return true
}

// resolve completes the parts of a checked group: with the group's
// outcome, or, when a check failed, each with the outcome of its write
// committed alone.
func (c *conn) resolve(h *engine.Handle, v table.Version, parts []checkedPart, completes []func(engine.Result, error)) {
	// Not c.ctx: a submitted commit completes whatever happens to the
	// connection, and its outcome is what the parts must carry.
	ctx := context.Background()
	res, err := h.Wait(ctx)
	if !errors.Is(err, engine.ErrConflict) {
		for i, p := range parts {
			if err == nil && p.applied != nil {
				p.applied(v)
			}
			completes[i](res, err)
		}
		return
	}
	for i, p := range parts {
		tx := c.b.db.Begin()
		if err := p.write(tx); err != nil {
			completes[i](engine.Result{}, err)
			continue
		}
		var res engine.Result
		ph, err := tx.Submit(ctx)
		if err == nil {
			res, err = ph.Wait(ctx)
		}
		if err == nil && p.applied != nil {
			p.applied(tx.Version())
		}
		completes[i](res, err)
	}
}

// ack queues an acknowledgement of the read loop behind the pending
// group's. Read loop only.
func (c *conn) ack(e ackEntry) bool {
	if !c.flushGroup() {
		return false
	}
	return c.push(e)
}

// submit starts a commit of the read loop after the pending group's.
// Read loop only.
func (c *conn) submit(tx *table.Tx) (*engine.Handle, error) {
	if !c.flushGroup() {
		return nil, errGroupFailed
	}
	return c.submitNow(tx)
}

// packetReady reports whether a whole packet waits in the read buffer, so
// reading it will not block.
func (c *conn) packetReady() bool {
	n := c.br.Buffered()
	if n < 2 {
		return false
	}
	head, _ := c.br.Peek(min(n, 5))
	size, mult := 0, 1
	for i := 1; i < len(head); i++ {
		size += int(head[i]&0x7f) * mult
		if head[i]&0x80 == 0 {
			return i+1+size <= n
		}
		mult <<= 7
	}
	return false
}
