package broker

import (
	"errors"
	"runtime"
	"sync"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// maxGroup bounds the packets whose writes share one commit.
const maxGroup = 256

// maxGroupWrites bounds the writes and the checks a group's transaction
// is sized for at its start (see beginGroup).
const maxGroupWrites = 4 * maxGroup

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

// checkedPart is one write of a checked group, held by value so that a
// part costs no allocation of its own: a staging (stage set: the exchange
// it stages, which learns of the group's commit at submission: its
// handle, the version the write carries if the commit applies, and the
// group's redo, nil for a group of one, to wait for when the commit
// fails a check) or a release.
type checkedPart struct {
	stage *exchange
	enc   []byte // with stage: the bytes to stage
	// release is the part's writes when stage is nil.
	release releaseWrite
}

// apply adds the part's writes to tx.
func (p *checkedPart) apply(b *Broker, tx *table.Tx) error {
	if p.stage == nil {
		return p.release.write(b, tx)
	}
	return stageWrite(tx, p.stage.slot, p.enc)
}

// redo holds the outcomes of a checked group's writes committed one by
// one, once a check of the group failed; the ack loop runs it at the
// group's first acknowledgement whose commit failed. Every checked group
// of several gets one, and almost none runs: it costs one allocation,
// with a small group's parts inside, and its channel is made only for a
// reader that waits (see finished).
type redo struct {
	ran   bool // ack loop only
	parts []checkedPart
	errs  []error // set before ended
	small [4]checkedPart

	mu    sync.Mutex
	ended bool
	done  chan struct{} // made by finished, closed once ended
}

// newRedo returns the redo of a group of parts, which it keeps: it
// copies a small group's, and takes the array of a larger one (taken
// reports which).
func newRedo(parts []checkedPart) (r *redo, taken bool) {
	r = &redo{}
	if len(parts) <= len(r.small) {
		r.parts = append(r.small[:0], parts...)
		return r, false
	}
	r.parts = parts
	return r, true
}

// finished returns a channel closed once the redo has run.
func (r *redo) finished() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = make(chan struct{})
		if r.ended {
			close(r.done)
		}
	}
	return r.done
}

// end marks the redo run, waking the readers waiting for it.
func (r *redo) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	if r.done != nil {
		close(r.done)
	}
}

// run commits each write of the group on its own, in order, once. Ack
// loop only.
func (r *redo) run(c *conn) {
	if r.ran {
		return
	}
	r.ran = true
	defer r.end()
	r.errs = make([]error, len(r.parts))
	for i := range r.parts {
		tx := c.db.Begin()
		if err := r.parts[i].apply(c.b, tx); err != nil {
			r.errs[i] = err
			continue
		}
		r.errs[i] = tx.Commit(c.ctx)
	}
}

// outcome is the outcome of the group's part i as the acknowledgement
// waiting for it learns it: err, the group's commit's, unless that
// commit failed a check, which sends every part of the group through the
// redo. Ack loop only.
func (r *redo) outcome(c *conn, i int32, err error) error {
	if !errors.Is(err, engine.ErrConflict) {
		return err
	}
	r.run(c)
	return r.errs[i]
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
		c.grp.tx = c.beginGroup(false)
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
	releases := part.stage == nil
	if c.grp.tx != nil && (!c.grp.checked || c.grp.releases != releases) && !c.flushGroup() {
		return false
	}
	if c.grp.tx == nil {
		c.grp.tx, c.grp.checked, c.grp.releases = c.beginGroup(true), true, releases
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

// beginGroup starts the pending group's transaction, sized as the last
// group of its kind (checked or not) was: a pipelining client's groups are
// alike, and their arrays then cost one allocation each rather than one
// per doubling.
func (c *conn) beginGroup(checked bool) *table.Tx {
	s := c.lastGroupSize(checked)
	return c.db.BeginSized(int(s.writes), int(s.checks))
}

// groupSize is how many writes and checks a group's transaction held.
type groupSize struct{ writes, checks uint16 }

// lastGroupSize is where the size of the last group of the kind is kept.
func (c *conn) lastGroupSize(checked bool) *groupSize {
	if checked {
		return &c.grpSize[1]
	}
	return &c.grpSize[0]
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
	if !c.grp.checked && c.out != nil && c.out.LazyDue() {
		// Held-back exchange endings ride along when the checkpoint has
		// not taken them (see delivery's lazyEnds).
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
	w, k := g.tx.Size()
	*c.lastGroupSize(g.checked) = groupSize{uint16(min(w, maxGroupWrites)), uint16(min(k, maxGroupWrites))}
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
	if len(g.entries) > 1 && (g.checked || g.tx.Logged()) && c.b.deliv.Behind() {
		// A pipelining publisher lets a sender that is behind run first
		// (see delivery.Env.Behind). Only a publisher's group: a
		// subscriber's acknowledgements (PUBREC records, exchange
		// endings) free its window, and yielding them to the publishers
		// would hold back the very sender that is behind.
		c.b.yields.Add(1)
		runtime.Gosched()
	}
	return true
}

// bindChecked tells each staging of the checked group g, just submitted
// under h, of its commit. A group of several gets a redo, which keeps its
// parts: when it takes g.parts, the next group gets an array of its own,
// as large; when it copies them, the next group reuses g.parts.
func (c *conn) bindChecked(g group, h *engine.Handle) {
	v := g.tx.Version()
	if len(g.parts) == 1 {
		if ex := g.parts[0].stage; ex != nil {
			ex.h, ex.version, ex.redo = h, uint64(v), nil
		}
		g.parts[0] = checkedPart{} // its staged bytes are not the next group's to keep
		return
	}
	r, taken := newRedo(g.parts)
	for _, p := range g.parts {
		if ex := p.stage; ex != nil {
			ex.h, ex.version, ex.redo = h, uint64(v), r
		}
	}
	if taken {
		c.grp.parts = make([]checkedPart, 0, cap(g.parts))
	} else {
		clear(g.parts) // the redo's copy holds the staged bytes
	}
	for i := range g.entries {
		g.entries[i].redo, g.entries[i].part = r, int32(i)
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
