package delivery

import (
	"context"
	"errors"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/tabletopic"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// tableFeedBuffer is how many deliveries a table subscription's reader
// may hand the session's sender before it waits for it.
const tableFeedBuffer = 16

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
	m        *message.Message
	snapshot bool // a current record sent because of the subscription
}

// startTableFeed starts (or restarts) the reader of the table
// subscription s; with snapshot it sends the current records first.
func (o *Session) startTableFeed(s topic.Subscription, snapshot bool) {
	tf, err := o.env.Tables.ParseFilter(s.Filter)
	if err != nil {
		return // refused at SUBSCRIBE; a stored one from another prefix
	}
	ctx, cancel := context.WithCancel(o.ctx)
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
func (o *Session) hasTableFeed(filter string) bool {
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
func (o *Session) dropTableFeedLocked(filter string) {
	if f := o.tables[filter]; f != nil {
		f.cancel()
		delete(o.tables, filter)
	}
}

// endTableFeeds stops every table reader of the session and waits for
// them (on teardown).
func (o *Session) endTableFeeds() {
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
func (f *tableFeed) run(ctx context.Context, o *Session, ch chan<- tableItem, snapshot bool) {
	defer close(f.done)
	for {
		err := f.read(ctx, o, ch, snapshot)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, table.ErrHistoryUnavailable) {
			o.log.Warn("table subscription ended", "filter", f.Filter.Filter, "err", err)
			o.conn.Disconnect(packet.UnspecifiedError, "table subscription "+f.Filter.Filter+" failed")
			return
		}
		o.log.Info("table subscription behind the retained log: sending the current records again", "filter", f.Filter.Filter)
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
func (f *tableFeed) read(ctx context.Context, o *Session, ch chan<- tableItem, snapshot bool) error {
	prefix := o.env.Tables.Prefix
	from, err := o.env.Parts.DB(0).Head(ctx)
	if err != nil {
		return err
	}
	sub, err := o.env.Parts.DB(0).Subscribe(ctx, table.SubscribeOptions{
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
	v5 := o.v5
	var seen map[string]table.Version
	var newest table.Version // the newest version in the view
	if snapshot {
		seen = map[string]table.Version{}
		err = o.env.Parts.DB(0).View(ctx, func(v *table.View) error {
			var get func(string) (table.Record, error)
			if v5 {
				get = func(id string) (table.Record, error) { return v.Get(tabletopic.MetaTable, id) }
			}
			return v.Range(f.Table, f.IDs, func(r table.Record) bool {
				if !topic.Match(f.Filter.Filter, f.TopicOf(prefix, r.ID)) {
					return true
				}
				seen[r.ID] = r.Version
				newest = max(newest, r.Version)
				return send(tableItem{f: f, m: o.env.Tables.Message(table.OpPut, r.Table, r.ID, r.Value, r.Version, get), snapshot: true})
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
		get = func(id string) (table.Record, error) { return o.env.Parts.DB(0).Get(ctx, tabletopic.MetaTable, id) }
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
		if !send(tableItem{f: f, m: o.env.Tables.Message(ev.Op, ev.Table, ev.ID, ev.Value, ev.Version, get)}) {
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
func (o *Session) tableChan() chan tableItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.tableCh
}

// drainTables sends what the table feeds handed over, within the window.
// Sender only.
func (o *Session) drainTables() {
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
func (o *Session) deliverTable(it tableItem) {
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
	if sub == nil || (s.NoLocal && it.m.From == o.client) || !o.conn.MayRead(it.m.Topic) {
		return
	}
	var ids []uint32
	if s.ID != 0 {
		ids = []uint32{s.ID}
	}
	o.env.Counters.TableDelivered.Add(1)
	retain := it.snapshot || (it.m.Retain && s.RetainAsPublished)
	o.send(delivery{msg: it.m, qos: min(s.QoS, 1), ids: ids, retain: retain})
}

// startTableFeeds starts the readers of a restored session's table
// subscriptions, each with the current records: changes made while the
// session was offline are not queued, the current records stand for them.
func (o *Session) startTableFeeds() {
	if o.env.Tables.Prefix == "" {
		return
	}
	o.mu.Lock()
	var subs []topic.Subscription
	for _, s := range o.subs {
		if s.Group == "" && o.env.Tables.Contains(s.Filter) {
			subs = append(subs, s)
		}
	}
	o.mu.Unlock()
	for _, s := range subs {
		o.startTableFeed(s, true)
	}
}

// SubscribeTable starts the reader of a new or renewed table
// subscription s, following its retain handling as for retained
// messages: the current records are sent unless the handling is "do not
// send", or "send if new" for an existing subscription, whose running
// reader then goes on.
func (o *Session) SubscribeTable(s topic.Subscription, existed bool) {
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
