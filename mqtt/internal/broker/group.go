package broker

import (
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
// group applied: the ack loop, at the group's first acknowledgement, then
// commits each staging on its own, in order, so only those whose checks
// fail see the conflict. Stagings commit no log entry, so redoing them
// after later commits changes no order anyone sees. The releases of
// QoS 2 messages this connection staged go in checked groups too, never
// with stagings: a release's check fails only when another connection of
// the session released the copy first (a takeover race, where the two
// connections' releases are in no order anyway), so a group of releases
// is redone, releasing each exactly once but after later commits, only
// then; a staging's failed check (a duplicate) must not send releases
// behind later ones. Other checked writes (session records, releases of
// copies read from the store) are never grouped.
type group struct {
	tx      *table.Tx
	entries []ackEntry
	checked bool
	parts   []checkedPart // with checked: one per entry
	// releases: a checked group of releases (see checkedPart.release).
	releases bool
	// urgent: a write the client waits on (a message it published), not
	// only delivery state; a group without one is deferred (table.Tx's
	// Defer), since the subscriber's window keeps deliveries going.
	urgent bool
}

// checkedPart is one write of a checked group: how to redo it alone, and
// what learns of the group's commit at submission (bind, if not nil): its
// handle, the version the write carries if the commit applies, and the
// group's redo (nil for a group of one), to wait for when the commit fails
// a check.
type checkedPart struct {
	write func(tx *table.Tx) error // nil for a release
	bind  func(h *engine.Handle, v table.Version, r *redo)
	// release is the part's writes when write is nil.
	release releaseWrite
}

// apply adds the part's writes to tx.
func (p *checkedPart) apply(b *Broker, tx *table.Tx) error {
	if p.write == nil {
		return p.release.write(b, tx)
	}
	return p.write(tx)
}

// redo holds the outcomes of a checked group's writes committed one by
// one, once a check of the group failed; the ack loop runs it at the
// group's first acknowledgement, and closes done after.
type redo struct {
	ran  bool
	errs []error
	done chan struct{}
}

// run commits each write of parts on its own, in order, once. Ack loop
// only.
func (r *redo) run(c *conn, parts []checkedPart) {
	if r.ran {
		return
	}
	r.ran = true
	defer close(r.done)
	r.errs = make([]error, len(parts))
	for i := range parts {
		tx := c.b.db.Begin()
		if err := parts[i].apply(c.b, tx); err != nil {
			r.errs[i] = err
			continue
		}
		r.errs[i] = tx.Commit(c.ctx)
	}
}

// later adds write to the pending group and queues e for when the group's
// commit completes. Read loop only. False means the connection is ending.
func (c *conn) later(write func(tx *table.Tx) error, e ackEntry) bool {
	return c.addLater(write, e, true)
}

// laterDelivery is later for delivery state (outbound exchanges), whose
// commit nobody waits on at once.
func (c *conn) laterDelivery(write func(tx *table.Tx) error, e ackEntry) bool {
	return c.addLater(write, e, false)
}

func (c *conn) addLater(write func(tx *table.Tx) error, e ackEntry, urgent bool) bool {
	if c.grp.checked && !c.flushGroup() {
		return false
	}
	if c.grp.tx == nil {
		c.grp.tx = c.b.db.Begin()
	}
	c.grp.urgent = c.grp.urgent || urgent
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
	releases := part.write == nil
	if c.grp.tx != nil && (!c.grp.checked || c.grp.releases != releases) && !c.flushGroup() {
		return false
	}
	if c.grp.tx == nil {
		c.grp.tx, c.grp.checked, c.grp.releases = c.b.db.Begin(), true, releases
	}
	if err := part.apply(c.b, c.grp.tx); err != nil {
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
	return n >= c.b.group || n >= c.acks.Free()
}

// flushGroup submits the pending group and queues its acknowledgements.
// Read loop only.
func (c *conn) flushGroup() bool {
	if c.grp.tx == nil {
		return true
	}
	if !c.grp.checked && c.out != nil && c.out.LazyPending() {
		// Held-back exchange endings ride along (see delivery's lazyEnds).
		then, err := c.out.WriteLazy(c.grp.tx)
		if err != nil {
			c.disconnect(packet.UnspecifiedError, err.Error())
			return false
		}
		if then != nil {
			c.grp.entries = append(c.grp.entries, ackEntry{then: then})
		}
	}
	g := c.grp
	// The next group reuses the arrays: the entries are copied into the
	// FIFO below, and the parts only a redo keeps (see bindChecked).
	c.grp = group{entries: g.entries[:0], parts: g.parts[:0]}
	if !g.checked && !g.urgent {
		g.tx.Defer()
	}
	h, err := c.submitNow(g.tx)
	c.releaseEncs() // Submit copied the values the writes took from it
	if err != nil {
		return false
	}
	if g.tx.Logged() && done(h) {
		c.pumpDue = true
	}
	if g.checked {
		c.bindChecked(g, h)
	}
	for _, e := range g.entries {
		e.h = h
		if !c.pushOwn(e) {
			return false
		}
	}
	return true
}

// bindChecked tells each write of the checked group g, just submitted
// under h, of its commit. A group of several gets a redo, which keeps
// g.parts: the next group must not reuse them.
func (c *conn) bindChecked(g group, h *engine.Handle) {
	if len(g.parts) == 1 {
		if g.parts[0].bind != nil {
			g.parts[0].bind(h, g.tx.Version(), nil)
		}
		g.parts[0] = checkedPart{} // its staged bytes are not the next group's to keep
		return
	}
	r := &redo{done: make(chan struct{})}
	for _, p := range g.parts {
		if p.bind != nil {
			p.bind(h, g.tx.Version(), r)
		}
	}
	c.grp.parts = nil
	for i := range g.entries {
		e := &g.entries[i]
		own := e.after
		e.after = func(err error) error {
			if errors.Is(err, engine.ErrConflict) {
				r.run(c, g.parts)
				err = r.errs[i]
			}
			if own != nil {
				return own(err)
			}
			return err
		}
	}
}

// pushOwn queues an acknowledgement of the read loop, or, when nothing is
// queued before it and its commit is already done (no sync to wait for),
// sends it at once from the read loop: no hand-off to the ack loop, and
// the acknowledgements of a burst go out in the read loop's one flush
// (see readLoop). Read loop only.
func (c *conn) pushOwn(e ackEntry) bool {
	ok, sent := c.finishNow(e)
	if !sent {
		return c.push(e)
	}
	c.unflushed = true
	return ok
}

// finishNow finishes e from the calling goroutine, in the ack loop's
// place, when its commit is done and nothing is queued before it (sent);
// ok is false when finishing it ended the connection's acknowledgements.
// What it writes stays buffered: the caller flushes.
func (c *conn) finishNow(e ackEntry) (ok, sent bool) {
	if !c.ackNow(e) || !c.acks.Claim() {
		return true, false
	}
	ok = c.finishAck(e, nil)
	c.acks.Release(ok)
	return ok, true
}

// done reports whether h's commit has completed.
func done(h *engine.Handle) bool {
	select {
	case <-h.Done():
		return true
	default:
		return false
	}
}

// ackNow reports whether e can be finished without waiting: its commit
// is done and no hook holds acknowledgements.
func (c *conn) ackNow(e ackEntry) bool {
	if HooksEnabled && c.b.opts.Hooks.Ack != nil {
		return false
	}
	return e.h == nil || done(e.h)
}

// ack queues an acknowledgement of the read loop behind the pending
// group's. Read loop only.
func (c *conn) ack(e ackEntry) bool {
	if !c.flushGroup() {
		return false
	}
	return c.pushOwn(e)
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
	head := c.br.Peek(min(n, 5))
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
