package broker

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

var errClosedConn = errors.New("mqtt: connection closed")

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// handlePublish takes an inbound PUBLISH. The read loop never waits for the
// store: QoS 1 and 2 commits are submitted and their acknowledgements
// queued in the connection's FIFO.
func (c *conn) handlePublish(p *packet.Publish) bool {
	defer p.Release()
	name := p.Topic
	if c.version == packet.V5 && p.Properties.Has(packet.PropTopicAlias) {
		alias := p.Properties.TopicAlias
		if alias == 0 || int(alias) > c.b.opts.TopicAliasMaximum {
			c.disconnect(packet.TopicAliasInvalid, "topic alias out of range") // [MQTT-3.3.2-9]
			return false
		}
		if name != "" {
			if c.aliases == nil {
				c.aliases = map[uint16]string{}
			}
			c.aliases[alias] = name
		} else if name = c.aliases[alias]; name == "" {
			c.disconnect(packet.ProtocolError, "unknown topic alias")
			return false
		}
	}
	if !topic.ValidName(name) {
		c.disconnect(packet.TopicNameInvalid, "invalid topic name")
		return false
	}
	if err := c.b.checkTopic(name); err != nil {
		return c.refuseTopic(p, err)
	}
	if len(p.Properties.SubscriptionIDs) > 0 {
		c.disconnect(packet.ProtocolError, "subscription identifier in a PUBLISH from a client") // [MQTT-3.3.4-6]
		return false
	}
	if c.b.tables.Contains(name) {
		if _, _, err := c.b.tables.Split(name); err != nil {
			return c.refuseTableTopic(p, err)
		}
	}
	if !c.mayPublish(name) {
		return c.refusePublish(p)
	}
	if p.QoS > 0 && c.version == packet.V5 && int(c.inQoS1.Load())+c.pendingExchanges() >= c.b.opts.ReceiveMaximum {
		c.disconnect(packet.ReceiveMaximumExceeded, "receive maximum exceeded") // [MQTT-3.3.4-7]
		return false
	}
	if c.b.overBudget.Load() {
		return c.refuseOverBudget(p)
	}
	c.b.metrics.MsgsIn[p.QoS].Add(1)
	c.b.metrics.BytesIn.Add(uint64(len(p.Payload)))
	if p.QoS == packet.QoS1 && !p.Retain && !c.b.tables.Contains(name) {
		return c.publishQoS1(p, name)
	}
	payload := p.Payload
	if p.QoS != packet.QoS2 {
		payload = append([]byte{}, payload...) // QoS 2: see publishQoS2
	}
	m := &Message{Topic: name, Payload: payload, QoS: byte(p.QoS), Retain: p.Retain, From: c.client}
	setMessageProps(m, &p.Properties, time.Now())
	switch p.QoS {
	case packet.QoS0:
		if c.b.sharedStore() && !c.b.tables.Contains(name) {
			// Through the log, to every node (see publishQoS0), in the
			// pending group: the publisher's order holds across QoS.
			return c.later(func(tx *table.Tx) error { return c.b.addMessage(tx, m) }, ackEntry{})
		}
		// With more input read, more messages are coming at once: the
		// senders write them in bursts, not one system call each here.
		c.b.publishQoS0(c.ctx, m, c.br.Buffered() == 0)
		return true
	case packet.QoS1:
		c.b.beforeSubmit(KindPublish, c.client)
		c.inQoS1.Add(1)
		return c.later(func(tx *table.Tx) error { return c.b.addMessage(tx, m) },
			ackEntry{pkt: &packet.Puback{PacketID: p.PacketID}, qos1: true, kind: KindPublish, pi: p.PacketID})
	default:
		return c.publishQoS2(p, m)
	}
}

// publishQoS1 queues a QoS 1 message that is neither retained nor a table
// write, with its PUBACK for when it is stored. It is encoded from the
// packet at once, so its payload is copied once, into the stored form, and
// no Message outlives the call.
func (c *conn) publishQoS1(p *packet.Publish, name string) bool {
	m := Message{Topic: name, Payload: p.Payload, QoS: byte(packet.QoS1), From: c.client}
	setMessageProps(&m, &p.Properties, time.Now())
	enc := c.encodeLater(&m)
	c.b.beforeSubmit(KindPublish, c.client)
	c.inQoS1.Add(1)
	return c.later(func(tx *table.Tx) error { return tx.Message(tableMsgs, name, enc) },
		ackEntry{ack: packet.TypePuback, qos1: true, kind: KindPublish, pi: p.PacketID})
}

// encodeLater returns m's stored form for a write of the pending group,
// in c.encs: the group's Submit copies its writes' values, after which
// flushGroup returns the buffer (see releaseEncs). Read loop only.
func (c *conn) encodeLater(m *Message) []byte {
	if c.encs == nil {
		c.encs = encBufs.Get().(*[]byte)
	}
	b := *c.encs
	start := len(b)
	b, _ = m.AppendBinary(b) // the stored form cannot fail to encode
	*c.encs = b
	return b[start:len(b):len(b)]
}

// releaseEncs returns the pending group's encoding buffer once its commit
// was submitted (or dropped). Connections share the buffers between their
// groups, so an idle one holds none.
func (c *conn) releaseEncs() {
	if c.encs == nil {
		return
	}
	if cap(*c.encs) <= maxEncs {
		*c.encs = (*c.encs)[:0]
		encBufs.Put(c.encs)
	}
	c.encs = nil
}

// encBufs are the groups' encoding buffers.
var encBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxEncs bounds the buffers encBufs keeps: a burst of large messages
// leaves no large buffer behind.
const maxEncs = 64 << 10

func (c *conn) pendingExchanges() int { return c.pendingQoS2 }

// submitNow starts a commit.
func (c *conn) submitNow(tx *table.Tx) (*engine.Handle, error) {
	h, err := tx.Submit(c.ctx)
	if err != nil {
		c.warn("submit failed", err)
		c.disconnect(packet.UnspecifiedError, "store unavailable")
		return nil, err
	}
	return h, nil
}

// publishQoS2 stages a QoS 2 message (first write wins) and queues PUBREC
// for when the staging is durable. m's payload is the packet's, which is
// reused after the call: m is kept only once its payload is the copy in
// its stored form.
func (c *conn) publishQoS2(p *packet.Publish, m *Message) bool {
	pi := p.PacketID
	ex := c.exchanges[pi]
	if ex != nil && !ex.released {
		// A re-sent PUBLISH of a pending exchange: no second store, which
		// could land after the release and leave a stray copy; still owed
		// its PUBREC.
		return c.ack(ackEntry{ack: packet.TypePubrec, pi: pi, atSent: PointPubrecSent})
	}
	if ex != nil {
		delete(c.exchanges, pi) // a new publication on a released id
	}
	enc, err := m.MarshalOwn()
	if err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	ex = &exchange{slot: slotID(c.client, pi)}
	entry := ackEntry{ack: packet.TypePubrec, after: func(err error) error {
		if errors.Is(err, engine.ErrConflict) {
			return nil // already staged: a duplicate, still owed its PUBREC
		}
		return err
	}, kind: KindStage, pi: pi, atSent: PointPubrecSent}
	c.b.beforeSubmit(KindStage, c.client)
	c.pendingQoS2++
	c.rowless = false // from here on the session may hold a staged copy
	// A DUP PUBLISH the connection does not know may repeat one staged by
	// an earlier connection with other bytes: keep no copy, so the PUBREL
	// loads whichever bytes won. The exchange is pending all the same: its
	// PUBREL waits for this staging, and a re-sent PUBLISH stores nothing.
	if size := len(enc); !p.Dup && c.copies < maxCopies && c.copyBytes+size <= maxCopyBytes {
		ex.msg, ex.enc, ex.size = m, enc, size
		c.copies++
		c.copyBytes += size
	}
	c.exchanges[pi] = ex
	if !p.Dup && !c.stagedBefore[pi] {
		// A first transmission on an id no earlier connection left
		// staged: its slot is free, so its staging joins the others that
		// came with it (a failed check would send the group down the slow
		// path, and the stagings after it into the store before it).
		// When a check of the group fails, ex.h says so, and the PUBREL
		// waits for the redo, then reads the staged copy from the store.
		return c.laterChecked(checkedPart{stage: ex, enc: enc}, entry)
	}
	// A DUP, or an id an earlier connection staged, usually finds its
	// slot taken: a commit of its own.
	tx := c.db.Begin()
	if err := stageWrite(tx, ex.slot, enc); err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	h, err := c.submit(tx)
	if err != nil {
		return false
	}
	ex.version, ex.h = uint64(tx.Version()), h
	entry.h = h
	return c.ack(entry)
}

// stageWrite adds to tx the staging of enc in slot id, first write wins.
// The slot is state no version entry tracks (one engine entry to write
// and one to delete): its check reads the record itself.
func stageWrite(tx *table.Tx, id string, enc []byte) error {
	if err := tx.ExpectNoState(tableStaged, id); err != nil {
		return err
	}
	return tx.PutStateUnchecked(tableStaged, id, enc)
}

// handlePubrel releases a staged QoS 2 message.
func (c *conn) handlePubrel(p *packet.Pubrel) bool {
	pi := p.PacketID
	c.b.at(PointPubrelRead, c.client, pi)
	ex := c.exchanges[pi]
	if (ex == nil || ex.h == nil) && !c.flushGroup() {
		// The staging this PUBREL waits for is in the pending group, or
		// the store is read below: either way it goes first. Releases
		// of stagings already submitted join the pending group instead.
		return false
	}
	if ex != nil && ex.released {
		// Released already; never consult the store again for it.
		return c.ack(ackEntry{ack: packet.TypePubcomp, pi: pi, atSent: PointPubcompSent})
	}
	if ex != nil {
		// Staged by this connection: the read below must see the staging
		// (only this id's commit is waited for, so PUBRELs that read the
		// store do not queue behind every commit before them). The
		// pending group does not wait with it.
		if !done(ex.h) && !c.flushGroup() {
			return false
		}
		select {
		case <-ex.h.Done():
		case <-c.ctx.Done():
			return false
		}
		if ex.redo != nil && errors.Is(ex.h.Err(), engine.ErrConflict) {
			// Its group failed a check: the ack loop commits the
			// stagings one by one; this one may be among them.
			select {
			case <-ex.redo.finished():
			case <-c.ctx.Done():
				return false
			}
		}
		if ex.msg != nil && ex.h.Err() == nil {
			return c.release(pi, ex.slot, ex.msg, staged{version: table.Version(ex.version), enc: ex.enc})
		}
	}
	// No copy here (a DUP PUBLISH, a new connection, past the copy caps,
	// or the staging found the slot taken): the store is the source of
	// truth.
	id := slotID(c.client, pi)
	if ex != nil {
		id = ex.slot
	}
	rec, err := c.db.Get(c.ctx, tableStaged, id)
	if errors.Is(err, table.ErrNotFound) {
		c.forget(pi)
		comp := &packet.Pubcomp{PacketID: pi}
		if c.version == packet.V5 {
			comp.ReasonCode = packet.PacketIdentifierNotFound
		}
		return c.ack(ackEntry{pkt: comp, pi: pi, atSent: PointPubcompSent})
	}
	if err != nil {
		c.disconnect(packet.UnspecifiedError, "store unavailable")
		return false
	}
	c.b.at(PointStagedLoad, c.client, pi)
	var m Message
	if err := m.UnmarshalBinary(rec.Value); err != nil {
		// Discard the corrupt copy so the PUBREL the client retries
		// converges to a clean PUBCOMP; fail this connection without one.
		tx := c.db.Begin()
		tx.DeleteState(tableStaged, id)
		if cerr := tx.Commit(c.ctx); cerr != nil {
			c.log.Warn("discard corrupt staged message", "err", cerr)
		}
		c.log.Warn("corrupt staged message discarded", "packet_id", pi, "err", err)
		c.disconnect(packet.UnspecifiedError, "corrupt staged message")
		return false
	}
	return c.release(pi, id, &m, staged{version: rec.Version, enc: rec.Value, read: true})
}

// staged is a staged copy as its commit wrote it.
type staged struct {
	version table.Version
	enc     []byte // the stored form of the message
	// read says it was read from the store: an earlier run of the broker
	// may have staged it with a version entry beside the record.
	read bool
}

// release appends the staged message to the log and deletes the staged
// copy in one commit, conditional on the copy still being the one staged
// (its version and bytes): of two releases racing (a retried PUBREL here
// or on another node), exactly one delivers. id is pi's slot.
//
// The release of a copy this connection staged joins the pending checked
// group (see group): the PUBRELs of a pipelining client share a commit,
// as their PUBLISHes' stagings do. A release of a copy read from the
// store commits alone.
func (c *conn) release(pi uint16, id string, m *Message, st staged) bool {
	entry := ackEntry{ack: packet.TypePubcomp, after: releaseOutcome,
		kind: KindRelease, pi: pi, atDone: PointReleaseCommitted, atSent: PointPubcompSent}
	c.b.beforeSubmit(KindRelease, c.client)
	// The part carries its release by value: a closure would cost an
	// allocation per message.
	rel := releaseWrite{id: id, m: m, st: st}
	if !st.read {
		c.forget(pi)
		c.exchanges[pi] = releasedExchange
		return c.laterChecked(checkedPart{release: rel}, entry)
	}
	tx := c.db.Begin()
	if err := rel.write(c.b, tx); err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	h, err := c.submit(tx)
	if err != nil {
		return false
	}
	c.forget(pi)
	c.exchanges[pi] = releasedExchange
	entry.h = h
	return c.ack(entry)
}

// releaseWrite is a release's writes: the staged copy st of slot id
// deleted, conditional on its being the one staged, and m appended to the
// log.
type releaseWrite struct {
	id string
	m  *Message
	st staged
}

func (r *releaseWrite) write(b *Broker, tx *table.Tx) error {
	tx.ExpectState(tableStaged, r.id, r.st.version, r.st.enc)
	if r.st.read {
		tx.DeleteState(tableStaged, r.id) // the version entry too, if there is one
	} else {
		tx.DeleteStateUnchecked(tableStaged, r.id)
	}
	return b.addMessageEnc(tx, r.m, r.st.enc)
}

// releaseOutcome judges a release's commit: a failed check means an
// earlier PUBREL (here or on another node) released the copy, and this
// one delivers nothing more.
func releaseOutcome(err error) error {
	if errors.Is(err, engine.ErrConflict) {
		return nil
	}
	return err
}

// forget drops the copy held for pi; the exchange no longer counts
// against the receive maximum.
func (c *conn) forget(pi uint16) {
	if c.pendingQoS2 > 0 {
		c.pendingQoS2--
	}
	if ex := c.exchanges[pi]; ex != nil && ex.msg != nil {
		c.copies--
		c.copyBytes -= ex.size
	}
	delete(c.exchanges, pi)
}

// addMessage appends a QoS 1/2 message to the log, and updates the
// retained store when the message is retained, in tx. A message on a
// topic under the tables prefix writes its table instead (package tabletopic).
func (b *Broker) addMessage(tx *table.Tx, m *Message) error {
	if b.tables.Contains(m.Topic) {
		return b.addMessageEnc(tx, m, nil) // a table write stores no message
	}
	enc, err := m.MarshalBinary()
	if err != nil {
		return err
	}
	return b.addMessageEnc(tx, m, enc)
}

// addMessageEnc is addMessage of m stored as enc (m's stored form).
func (b *Broker) addMessageEnc(tx *table.Tx, m *Message, enc []byte) error {
	if b.tables.Contains(m.Topic) {
		b.metrics.TableWrites.Add(1)
		return b.tables.AddWrite(tx, m)
	}
	if err := tx.Message(tableMsgs, m.Topic, enc); err != nil {
		return err
	}
	return b.addRetained(tx, m, enc)
}

// addRetained updates the retained store with m, in tx, when m is
// retained (its table, under the tables prefix).
func (b *Broker) addRetained(tx *table.Tx, m *Message, enc []byte) error {
	if !m.Retain {
		return nil
	}
	if b.tables.Contains(m.Topic) {
		b.metrics.TableWrites.Add(1)
		return b.tables.AddWrite(tx, m)
	}
	if !b.admitRetained(m) {
		return nil
	}
	// State, not logged changes: no one follows the retained store's
	// changes (a SUBSCRIBE reads it, and the message itself is in the
	// log), and a logged write put a second log entry beside every
	// retained message, for every session's catch-up to read past.
	if len(m.Payload) == 0 {
		if b.split() {
			// Other partitions may hold copies from other publishers,
			// which a deletion here would not hide: a marker newer than
			// them does (readers take the newest copy, see
			// retainedPage), and readers pass over a marker.
			return tx.PutState(tableRetained, m.Topic, enc)
		}
		return tx.DeleteState(tableRetained, m.Topic) // [MQTT-3.3.1-6]
	}
	return tx.PutState(tableRetained, m.Topic, enc)
}

// publishQoS0 routes a QoS 0 message to online subscribers in memory; a
// retained one also updates the retained store. With now, the calling
// goroutine may write it to a few subscribers itself (see delivery.Session.SendNow).
//
// When other nodes share the store, the message goes through the log
// instead, as QoS 1 and 2 ones do: every node's router reads it and
// hands it to that node's online subscribers (those that came online
// after it was published pass it over, as at most once requires), and
// its shared groups get it once across the nodes (see sharenodes.go).
// The commit is not waited for.
func (b *Broker) publishQoS0(ctx context.Context, m *Message, now bool) {
	if b.tables.Contains(m.Topic) {
		b.metrics.TableWrites.Add(1)
		b.submitTable(ctx, m)
		return
	}
	if b.sharedStore() {
		tx := b.dbFor(m.From).Begin()
		err := b.addMessage(tx, m)
		var h *engine.Handle
		if err == nil {
			h, err = tx.Submit(ctx)
		}
		if err == nil && m.Retain {
			b.retains.add(h)
		}
		if err != nil && ctx.Err() == nil {
			b.log.Warn("QoS 0 message not stored for the other nodes; dropped", "topic", m.Topic, "err", err)
		}
		return
	}
	if m.Retain {
		enc, err := m.MarshalBinary()
		if err == nil {
			tx := b.dbFor(m.From).Begin()
			if err = b.addRetained(tx, m, enc); err == nil {
				var h *engine.Handle
				switch h, err = tx.Submit(ctx); {
				case err == nil:
					b.retains.add(h)
				case errors.Is(err, engine.ErrEmptyBatch):
					err = nil // not admitted past --max-retained, which warned
				}
			}
		}
		if err != nil {
			b.log.Warn("retain failed", "topic", m.Topic, "err", err)
		}
	}
	b.fanout(m, fanoutOpts{now: now})
}

// fanoutOpts are the choices of a fanout.
type fanoutOpts struct {
	// now lets the calling goroutine write to a few sessions itself
	// (see delivery.Session.SendNow): a publisher with no more input waiting.
	now bool
}

// fanout delivers m to the online sessions whose subscriptions match:
// plain subscriptions only for QoS 0 messages (QoS 1/2 ones reach them
// through the log), and one member of each shared group.
func (b *Broker) fanout(m *Message, opts fanoutOpts) {
	type target struct {
		qos byte
		ids []uint32
		rap bool
	}
	if b.tables.Contains(m.Topic) {
		return // table subscriptions read the table, not these
	}
	targets := map[string]*target{}
	b.router.Index().Match(m.Topic, func(s topic.Subscription) {
		if s.NoLocal && s.Client == m.From {
			return
		}
		t := targets[s.Client]
		if t == nil {
			t = &target{}
			targets[s.Client] = t
		}
		t.qos = max(t.qos, min(s.QoS, m.QoS))
		if s.ID != 0 {
			t.ids = append(t.ids, s.ID)
		}
		t.rap = t.rap || s.RetainAsPublished
	})
	if len(targets) == 0 {
		return
	}
	type handoff struct {
		out *delivery.Session
		d   delivery.Direct
	}
	var small [4]handoff
	ds := small[:0]
	b.mu.Lock()
	for client, t := range targets {
		c := b.conns[client]
		if c == nil || c.out == nil || !b.guard.MayRead(b.ctx, client, c.id.Username, m.Topic) {
			continue
		}
		ds = append(ds, handoff{c.out, delivery.Direct{Msg: m, QoS: t.qos, IDs: t.ids, Retain: m.Retain && t.rap}})
	}
	b.mu.Unlock()
	// Written from here only to a few: each write is a system call on
	// this goroutine, where a sender woken per subscriber runs beside it.
	now := opts.now && len(ds) <= delivery.MaxSendNowTargets
	for _, x := range ds {
		if !now || !x.out.SendNow(x.d) {
			x.out.Offer(x.d)
		}
	}
}

// setMessageProps copies the 5.0 message properties of a PUBLISH or will.
func setMessageProps(m *Message, p *packet.Properties, now time.Time) {
	if p.Has(packet.PropPayloadFormat) {
		m.HasFormat, m.PayloadFormat = true, p.PayloadFormat
	}
	if p.Has(packet.PropMessageExpiry) {
		m.Expires = now.Add(time.Duration(p.MessageExpiry) * time.Second)
	}
	m.ContentType = p.ContentType
	m.ResponseTopic = p.ResponseTopic
	if len(p.CorrelationData) > 0 {
		m.CorrelationData = bytes.Clone(p.CorrelationData) // the packet's buffer is reused
	}
	for _, u := range p.User {
		m.UserProps = append(m.UserProps, UserProperty{Key: u.Key, Value: u.Value})
	}
}
