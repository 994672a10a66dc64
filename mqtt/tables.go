package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark-io/tidemark/mqtt/internal/tabletopic"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// ErrTableTopic reports a topic or filter under Options.TablesPrefix that
// names no record or table the broker may use: no table or id level, a
// wildcard in the table level, a reserved or over-long table name, an
// over-long id.
var ErrTableTopic = tabletopic.ErrTopic

// tableTopicMeta holds the properties of the PUBLISHes written to tables.
const tableTopicMeta = tabletopic.MetaTable

// tableFeedBuffer is how many deliveries a table subscription's reader
// may hand the session's sender before it waits for it.
const tableFeedBuffer = 16

// normTablesPrefix checks and completes Options.TablesPrefix: a topic
// name without wildcards, ending with "/".
func normTablesPrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if !topic.ValidName(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, ReplayPrefix) || strings.HasPrefix(p, "$share/") {
		return "", fmt.Errorf("%w: tables prefix %q: use a topic name without wildcards, such as tables/", ErrTableTopic, p)
	}
	return p, nil
}

// refuseTableTopic answers a PUBLISH on an invalid topic under the
// tables prefix without writing it: 5.0 gets 0x90 Topic Name invalid
// with a reason string in its PUBACK or PUBREC (DISCONNECT for QoS 0); a
// 3.1.1 client, which cannot be told, gets its acknowledgement and the
// message is dropped, as for a publish its ACL refuses.
func (c *conn) refuseTableTopic(p *packet.Publish, err error) bool {
	c.log.Info("publish refused", "topic", p.Topic, "err", err)
	c.b.metrics.TableRefused.Add(1)
	if c.version != packet.V5 {
		return c.refusePublish(p)
	}
	switch p.QoS {
	case packet.QoS1:
		ack := &packet.Puback{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}
		ack.Properties.SetReasonString(err.Error())
		return c.ack(ackEntry{pkt: ack, pi: p.PacketID})
	case packet.QoS2:
		ack := &packet.Pubrec{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}
		ack.Properties.SetReasonString(err.Error())
		return c.ack(ackEntry{pkt: ack, pi: p.PacketID})
	}
	c.disconnect(packet.TopicNameInvalid, err.Error())
	return false
}

// tableFeed is one session subscription under the tables prefix: its
// reader of the table, handing deliveries to the session's sender.
type tableFeed struct {
	tabletopic.Filter
	cancel context.CancelFunc
	done   chan struct{}
}

// tableItem is a delivery a table feed hands the sender.
type tableItem struct {
	f        *tableFeed
	m        *Message
	snapshot bool // a current record sent because of the subscription
}

// startTableFeed starts (or restarts) the reader of the table
// subscription s; with snapshot it sends the current records first.
func (o *outbound) startTableFeed(s topic.Subscription, snapshot bool) {
	c := o.c
	tf, err := c.b.tables.ParseFilter(s.Filter)
	if err != nil {
		return // refused at SUBSCRIBE; a stored one from another prefix
	}
	ctx, cancel := context.WithCancel(c.ctx)
	f := &tableFeed{Filter: tf, cancel: cancel, done: make(chan struct{})}
	o.mu.Lock()
	if old := o.tables[s.Filter]; old != nil {
		old.cancel()
	}
	if o.tables == nil {
		o.tables = map[string]*tableFeed{}
	}
	o.tables[s.Filter] = f
	if o.tableCh == nil {
		o.tableCh = make(chan tableItem, tableFeedBuffer)
	}
	ch := o.tableCh
	o.mu.Unlock()
	go f.run(ctx, o, ch, snapshot)
}

// hasTableFeed reports whether filter has a running reader.
func (o *outbound) hasTableFeed(filter string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := o.tables[filter]
	if f == nil {
		return false
	}
	select {
	case <-f.done:
		return false
	default:
		return true
	}
}

// dropTableFeedLocked stops the reader of filter; o.mu held.
func (o *outbound) dropTableFeedLocked(filter string) {
	if f := o.tables[filter]; f != nil {
		f.cancel()
		delete(o.tables, filter)
	}
}

// endTableFeeds stops every table reader of the session and waits for
// them (on teardown).
func (o *outbound) endTableFeeds() {
	o.mu.Lock()
	feeds := make([]*tableFeed, 0, len(o.tables))
	for _, f := range o.tables {
		f.cancel()
		feeds = append(feeds, f)
	}
	o.mu.Unlock()
	for _, f := range feeds {
		<-f.done
	}
}

// run reads the feed's table until ctx ends. When its reader falls behind
// the retained log (retention removed entries it had not read), it starts
// over with the current records: a table subscription delivers state, and
// the current records are that state.
func (f *tableFeed) run(ctx context.Context, o *outbound, ch chan<- tableItem, snapshot bool) {
	defer close(f.done)
	for {
		err := f.read(ctx, o, ch, snapshot)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, table.ErrHistoryUnavailable) {
			o.c.log.Warn("table subscription ended", "filter", f.Filter.Filter, "err", err)
			o.c.disconnect(packet.UnspecifiedError, "table subscription "+f.Filter.Filter+" failed")
			return
		}
		o.c.log.Info("table subscription behind the retained log: sending the current records again", "filter", f.Filter.Filter)
		snapshot = true
	}
}

// read subscribes to the table from its head, sends the current records
// (with snapshot) and then the subscription's events, until ctx ends or
// the subscription fails.
//
// No gap, no duplicate: the subscription starts at a head taken before
// the view the current records come from, so it delivers every write
// after that head (Head may lag what a view sees, never lead it). A
// write the view saw already, one of a record it holds at the same or a
// later version, is passed over. Versions increase in log order, so once
// an event is newer than every record of the view, none after it can be
// one the view saw, and the view's versions are let go.
func (f *tableFeed) read(ctx context.Context, o *outbound, ch chan<- tableItem, snapshot bool) error {
	b := o.c.b
	prefix := b.opts.TablesPrefix
	from, err := b.db.Head(ctx)
	if err != nil {
		return err
	}
	sub, err := b.db.Subscribe(ctx, table.SubscribeOptions{
		Table: f.Table, Prefix: f.IDs, Start: from, IncludeSuperseded: true, Buffer: 64,
		Filter: func(ev table.Event) bool { return topic.Match(f.Filter.Filter, f.TopicOf(prefix, ev.ID)) },
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Close() }()
	send := func(it tableItem) bool {
		select {
		case ch <- it:
			o.wake()
			return true
		case <-ctx.Done():
			return false
		}
	}
	// Properties are looked up only for clients that can receive them,
	// or that asked for no-local (5.0 as well).
	v5 := o.c.version == packet.V5
	var seen map[string]table.Version
	var newest table.Version // the newest version in the view
	if snapshot {
		seen = map[string]table.Version{}
		err = b.db.View(ctx, func(v *table.View) error {
			var get func(string) (table.Record, error)
			if v5 {
				get = func(id string) (table.Record, error) { return v.Get(tableTopicMeta, id) }
			}
			return v.Range(f.Table, f.IDs, func(r table.Record) bool {
				if !topic.Match(f.Filter.Filter, f.TopicOf(prefix, r.ID)) {
					return true
				}
				seen[r.ID] = r.Version
				newest = max(newest, r.Version)
				return send(tableItem{f: f, m: b.tables.Message(table.OpPut, r.Table, r.ID, r.Value, r.Version, get), snapshot: true})
			})
		})
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var get func(string) (table.Record, error)
	if v5 {
		get = func(id string) (table.Record, error) { return b.db.Get(ctx, tableTopicMeta, id) }
	}
	for ev := range sub.Events() {
		_ = sub.Ack(ev)
		if seen != nil {
			if ev.Version > newest {
				seen = nil // past the view: every write is new
			} else if v, ok := seen[ev.ID]; ok && ev.Op != table.OpMessage && ev.Version <= v {
				continue // the view had it, or a later write of the record
			}
		}
		if !send(tableItem{f: f, m: b.tables.Message(ev.Op, ev.Table, ev.ID, ev.Value, ev.Version, get)}) {
			break
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sub.Err()
}

// tableChan returns the channel the session's table feeds hand
// deliveries over on, nil before its first table subscription.
func (o *outbound) tableChan() chan tableItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tableCh
}

// drainTables sends what the table feeds handed over, within the window.
// Sender only.
func (o *outbound) drainTables() {
	ch := o.tableChan()
	if ch == nil {
		return
	}
	for o.waitWindow() {
		select {
		case it := <-ch:
			o.deliverTable(it)
		default:
			return
		}
	}
}

// deliverTable sends one table delivery to the client, at QoS 1 at most:
// the current record is sent again after any reconnect, so QoS 2's
// exactly-once exchange would add nothing.
func (o *outbound) deliverTable(it tableItem) {
	c := o.c
	o.mu.Lock()
	var sub *topic.Subscription
	if o.tables[it.f.Filter.Filter] == it.f {
		for i := range o.subs {
			if o.subs[i].Group == "" && o.subs[i].Filter == it.f.Filter.Filter {
				sub = &o.subs[i]
			}
		}
	}
	var s topic.Subscription
	if sub != nil {
		s = *sub
	}
	o.mu.Unlock()
	if sub == nil || (s.NoLocal && it.m.From == c.client) || !c.b.allow(c.ctx, c.id, AccessRead, it.m.Topic) {
		return
	}
	var ids []uint32
	if s.ID != 0 {
		ids = []uint32{s.ID}
	}
	c.b.metrics.TableDelivered.Add(1)
	retain := it.snapshot || (it.m.Retain && s.RetainAsPublished)
	o.send(delivery{msg: it.m, qos: min(s.QoS, 1), ids: ids, retain: retain})
}

// startTableFeeds starts the readers of a restored session's table
// subscriptions, each with the current records: changes made while the
// session was offline are not queued, the current records stand for them.
func (o *outbound) startTableFeeds() {
	if o.c.b.opts.TablesPrefix == "" {
		return
	}
	o.mu.Lock()
	var subs []topic.Subscription
	for _, s := range o.subs {
		if s.Group == "" && o.c.b.tables.Contains(s.Filter) {
			subs = append(subs, s)
		}
	}
	o.mu.Unlock()
	for _, s := range subs {
		o.startTableFeed(s, true)
	}
}

// publishTable writes an in-process publication on a topic under the
// tables prefix, whatever its QoS, and waits for the commit.
func (b *Broker) publishTable(ctx context.Context, m *Message) error {
	tx := b.db.Begin()
	if err := b.tables.AddWrite(tx, m); err != nil {
		if errors.Is(err, ErrTableTopic) {
			b.metrics.TableRefused.Add(1)
		}
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	b.metrics.TableWrites.Add(1)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	return nil
}

// submitTable writes a QoS 0 PUBLISH on a topic under the tables prefix
// without waiting for the commit (at most once, as QoS 0 is).
func (b *Broker) submitTable(ctx context.Context, m *Message) {
	tx := b.db.Begin()
	err := b.tables.AddWrite(tx, m)
	if err == nil {
		_, err = tx.Submit(ctx)
	}
	if err != nil {
		b.log.Warn("table write failed", "topic", m.Topic, "err", err)
	}
}

// checkTableFilter checks a SUBSCRIBE filter (sh, shared as
// topic.ParseShared returned them) against the tables prefix: a filter
// under it must name one table, and cannot be shared.
func (c *conn) checkTableFilter(filter string, sh topic.Shared, shared bool) (packet.ReasonCode, error) {
	inner := filter
	if shared {
		inner = sh.Filter
	}
	if !c.b.tables.Contains(inner) {
		return 0, nil
	}
	rc, err := packet.ReasonCode(0), error(nil)
	if shared {
		rc, err = packet.SharedSubscriptionsNotSupported, fmt.Errorf("%w: %q: a table subscription cannot be shared", ErrTableTopic, filter)
	} else if _, err = c.b.tables.ParseFilter(inner); err != nil {
		rc = packet.TopicFilterInvalid
	}
	if err != nil {
		c.b.metrics.TableRefused.Add(1)
		c.log.Info("subscription refused", "filter", filter, "err", err)
	}
	return rc, err
}

// subscribeTable starts the reader of a new or renewed table
// subscription s, following its retain handling as for retained
// messages: the current records are sent unless the handling is "do not
// send", or "send if new" for an existing subscription, whose running
// reader then goes on.
func (o *outbound) subscribeTable(s topic.Subscription, existed bool) {
	running := existed && o.hasTableFeed(s.Filter)
	switch {
	case s.RetainHandling == byte(packet.DoNotSendRetained) || (s.RetainHandling == byte(packet.SendRetainedIfNew) && existed):
		if !running {
			o.startTableFeed(s, false)
		}
	default:
		o.startTableFeed(s, true)
	}
}

// addReason appends why to the reason string of p.
func addReason(p *packet.Properties, why string) {
	if p.Has(packet.PropReasonString) && p.ReasonString != "" {
		why = p.ReasonString + "; " + why
	}
	p.SetReasonString(why)
}
