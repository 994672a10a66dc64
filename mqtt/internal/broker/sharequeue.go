package broker

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// A shared subscription group while none of its members is online.
//
// A persistent session's subscriptions leave the router's index when it
// goes offline, and a message matching a group with no online member
// used to reach nobody. The group now keeps it: the node that would have
// served the message (servesShare) writes it to the group's queue
// (tableShareQ), and the first member to come online takes the queue
// over (drainShare), in log order. Only QoS 1 and 2 messages wait, as
// for an offline session.
//
// Which groups have offline members a node knows from offlineShares: the
// share-members index of the stored sessions (session.SharesTable), read
// at start, then kept as this node's sessions go offline, come back and
// are discarded. On a cluster a member that came back on another node is
// still listed here; that node then publishes the group's online member
// and serves its messages, so this node queues nothing for it.
//
// A queued message's id is its group's prefix and its log position, the
// same on every node: nodes that each see no online member write it once
// between them (first write wins). Messages a leaving member held
// (reofferShared) have no position here; they get an id of this node's
// own, after the positioned ones.

// tableShareQ holds the queued messages of shared groups: id =
// session.ShareMembers(group, filter) then a 24-digit hex log position
// (or "~" and a node-local sequence), value = the stored message
// (unchecked state).
const tableShareQ = "mqtt.sharedq"

// drainBatch bounds the queued messages one claim commit takes.
const drainBatch = 128

// offlineShares are the shared subscriptions of the stored sessions not
// online on this node. Safe for concurrent use.
type offlineShares struct {
	mu       sync.Mutex
	byClient map[string][]topic.Share
	ix       topic.Index // one subscription per member, for Match
	n        atomic.Int64
	// queued counts, under mu, the messages of each share's queue as
	// this node wrote and claimed them (and found them at start), for
	// Options.MaxQueuedMessages; on a cluster it is this node's view.
	queued map[topic.Share]int
}

// admit counts one more message in sh's queue, reporting false when the
// queue holds max already (max 0: no bound).
func (o *offlineShares) admit(sh topic.Share, max int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if max > 0 && o.queued[sh] >= max {
		return false
	}
	if o.queued == nil {
		o.queued = map[topic.Share]int{}
	}
	o.queued[sh]++
	return true
}

// forget drops share sh: its queue count and its offline members.
func (o *offlineShares) forget(sh topic.Share) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.queued, sh)
	for _, s := range o.ix.Members(sh) {
		if o.ix.Remove(s.Client, sh.Group, sh.Filter) {
			o.n.Add(-1)
		}
		o.byClient[s.Client] = slices.DeleteFunc(o.byClient[s.Client], func(x topic.Share) bool { return x == sh })
		if len(o.byClient[s.Client]) == 0 {
			delete(o.byClient, s.Client)
		}
	}
}

// claimed counts n messages of sh's queue gone.
func (o *offlineShares) claimed(sh topic.Share, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queued[sh] <= n {
		delete(o.queued, sh)
		return
	}
	o.queued[sh] -= n
}

// add lists client's subscriptions to shares as offline.
func (o *offlineShares) add(client string, shares []topic.Share) {
	if len(shares) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byClient == nil {
		o.byClient = map[string][]topic.Share{}
	}
	for _, sh := range shares {
		if !o.ix.Add(topic.Subscription{Client: client, Group: sh.Group, Filter: sh.Filter, QoS: 2}) {
			o.byClient[client] = append(o.byClient[client], sh)
			o.n.Add(1)
		}
	}
}

// remove drops client's offline subscriptions (it came online, or its
// session is gone).
func (o *offlineShares) remove(client string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, sh := range o.byClient[client] {
		if o.ix.Remove(client, sh.Group, sh.Filter) {
			o.n.Add(-1)
		}
	}
	delete(o.byClient, client)
}

// has reports whether share sh has an offline member.
func (o *offlineShares) has(sh topic.Share) bool {
	return o.n.Load() > 0 && o.ix.MemberCount(sh) > 0
}

// match calls fn with one offline member of each share whose filter
// matches name.
func (o *offlineShares) match(name string, fn func(topic.Subscription)) {
	if o.n.Load() == 0 {
		return
	}
	o.ix.Match(name, func(s topic.Subscription) {
		if s.Group != "" {
			fn(s)
		}
	})
}

// loadOfflineShares lists the shared subscriptions of the stored
// sessions, none online yet, as offline; it builds the share-members
// index first on a store written before it existed.
func (b *Broker) loadOfflineShares(ctx context.Context) error {
	for _, st := range b.stores {
		if err := st.IndexShares(ctx); err != nil {
			return err
		}
	}
	byClient := map[string][]topic.Share{}
	err := b.rangeAll(ctx, session.SharesTable, "", func(_ int, r table.Record) bool {
		if group, filter, client, ok := session.ParseShareMemberID(r.ID); ok && !r.Deleted {
			byClient[client] = append(byClient[client], topic.Share{Group: group, Filter: filter})
		}
		return true
	})
	if err != nil {
		return err
	}
	for client, shares := range byClient {
		b.offline.add(client, shares)
	}
	err = b.db.Range(ctx, tableShareQ, "", func(r table.Record) bool {
		if group, rest, ok := strings.Cut(r.ID, session.Sep); ok && !r.Deleted {
			if filter, _, ok := strings.Cut(rest, session.Sep); ok {
				b.offline.admit(topic.Share{Group: group, Filter: filter}, 0)
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if len(byClient) > 0 {
		b.router.StartShared()
	}
	return nil
}

// queuedPos is the log position of the queued message whose id, after
// its share's prefix, is suffix; unset for a node-local id.
func queuedPos(suffix string) delivery.LogPos {
	p, err := hex.DecodeString(suffix)
	var part uint8
	if err == nil && len(p) == 13 && p[0] > 0 {
		part, p = p[0], p[1:]
	}
	if err != nil || len(p) != 12 {
		return delivery.LogPos{}
	}
	return delivery.LogPos{Key: engine.LogKey(binary.BigEndian.Uint64(p[:8])), Index: binary.BigEndian.Uint32(p[8:]), Part: part, Set: true}
}

// queuedShare is a message for a group's queue, written once b.mu is let
// go (flushShareQueue).
type queuedShare struct {
	sh  topic.Share
	id  string
	enc []byte
}

// queueShareLocked queues m for share sh when sh has an offline member
// and m waits for one (QoS 1 or 2); pos is its log position (unset: a
// node-local id). It reports whether m was queued. b.mu held.
//
// A member in the router's index that is not online yet (its session is
// joining the route) counts as offline: its drain takes the message.
func (b *Broker) queueShareLocked(m *Message, sh topic.Share, pos delivery.LogPos) bool {
	if m.QoS == 0 || (!b.offline.has(sh) && b.router.Index().MemberCount(sh) == 0) {
		return false
	}
	if !b.offline.admit(sh, b.opts.MaxQueuedMessages) {
		// Kept for the group, but past its bound: like an offline
		// session's queue, the group's holds Options.MaxQueuedMessages.
		b.metrics.DroppedSharedQueue.Add(1)
		return true
	}
	enc, err := m.MarshalBinary()
	if err != nil {
		return false
	}
	id := []byte(session.ShareMembers(sh.Group, sh.Filter))
	if pos.Set {
		// Log key and index; in a partition other than the first, after
		// the partition's number, so a message's id is the same on every
		// node and ids of different partitions never meet.
		var p [13]byte
		if pos.Part > 0 {
			p[0] = pos.Part
		}
		binary.BigEndian.PutUint64(p[1:9], uint64(pos.Key))
		binary.BigEndian.PutUint32(p[9:], pos.Index)
		if pos.Part == 0 {
			id = hex.AppendEncode(id, p[1:])
		} else {
			id = hex.AppendEncode(id, p[:])
		}
	} else {
		var p [16]byte
		binary.BigEndian.PutUint64(p[:8], uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(p[8:], b.shareSeq.Add(1))
		id = hex.AppendEncode(append(id, '~'), p[:])
	}
	b.shareQ = append(b.shareQ, queuedShare{sh: sh, id: string(id), enc: enc})
	if b.unsettled == nil {
		b.unsettled = map[topic.Share]int{}
	}
	b.unsettled[sh]++
	return true
}

// settledLocked counts one queue write of sh done (applied or not). b.mu
// held.
func (b *Broker) settledLocked(sh topic.Share) {
	if b.unsettled[sh] <= 1 {
		delete(b.unsettled, sh)
		return
	}
	b.unsettled[sh]--
}

// flushShareQueue writes the messages queueShareLocked queued. It does
// not wait for their commits (the router must not): a goroutine counts
// those that applied. Another node may have queued the same message
// first (a conflict), which is as it should be.
func (b *Broker) flushShareQueue() {
	b.mu.Lock()
	q := b.shareQ
	b.shareQ = nil
	b.mu.Unlock()
	if len(q) == 0 {
		return
	}
	type written struct {
		sh topic.Share
		h  *engine.Handle
	}
	ws := make([]written, 0, len(q))
	// Not the broker's context: a clean stop writes what the router
	// routed last (settleRouter) as the broker's context ends, and an
	// engine may drop a commit whose context ended before it applied.
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.StoreTimeout)
	defer cancel()
	for _, qs := range q {
		tx := b.db.Begin()
		tx.ExpectNoState(tableShareQ, qs.id)
		tx.PutStateUnchecked(tableShareQ, qs.id, qs.enc)
		h, err := tx.Submit(ctx)
		if err != nil {
			b.log.Warn("queue a shared subscription's message", "err", err)
			b.mu.Lock()
			b.settledLocked(qs.sh)
			b.mu.Unlock()
			continue
		}
		ws = append(ws, written{qs.sh, h})
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.StoreTimeout)
		defer cancel()
		for _, w := range ws {
			_, err := w.h.Wait(ctx)
			switch {
			case err == nil:
				b.metrics.SharedQueued.Add(1)
			case !errors.Is(err, engine.ErrConflict):
				b.log.Warn("queue a shared subscription's message", "err", err)
			}
			b.mu.Lock()
			b.settledLocked(w.sh)
			b.mu.Unlock()
		}
	}()
}

// sharesOnline hands the queues of shares to client, whose session is
// about to join the route with subscriptions to them
// (delivery.Env.Joined).
func (b *Broker) sharesOnline(client string, subs []topic.Subscription) {
	for _, s := range subs {
		b.startDrain(topic.Share{Group: s.Group, Filter: s.Filter}, client)
	}
}

// memberWait bounds how long a drain waits for the member it was started
// for to be on the route with its subscription.
const memberWait = 5 * time.Second

// startDrain starts handing share sh's queue to its online members, or
// makes the running drain go round once more. From now on the group's
// messages join its queue. A drain started for a member (client, not "")
// first waits for it to be on the route with its subscription to sh.
func (b *Broker) startDrain(sh topic.Share, client string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.draining == nil {
		b.draining = map[topic.Share]bool{}
	}
	_, running := b.draining[sh]
	b.draining[sh] = true
	if running || b.closing {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.waitMember(sh, client)
		b.drainShare(sh)
	}()
}

// waitMember waits, for at most memberWait, until client is online here
// with its subscription to sh in the router's index.
func (b *Broker) waitMember(sh topic.Share, client string) {
	if client == "" {
		return
	}
	for deadline := time.Now().Add(memberWait); time.Now().Before(deadline) && b.ctx.Err() == nil; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		ready := b.memberOnlineLocked(client) &&
			slices.ContainsFunc(b.router.Index().Members(sh), func(s topic.Subscription) bool { return s.Client == client })
		b.mu.Unlock()
		if ready {
			return
		}
	}
}

// drainShare offers the queue of share sh to its online members, oldest
// first, until the queue is empty or no member is online. Meanwhile the
// group's new messages join the queue (offerShareLocked), so they come
// after it. It ends, and the group's messages go to members directly
// again, only when the queue is empty with no write to it pending:
// decided under b.mu, which every queueing holds, so nothing can slip in
// between.
func (b *Broker) drainShare(sh topic.Share) {
	defer func() {
		b.mu.Lock()
		delete(b.draining, sh)
		b.mu.Unlock()
	}()
	for b.ctx.Err() == nil {
		b.mu.Lock()
		b.draining[sh] = false
		b.mu.Unlock()
		if !b.drainShareOnce(sh) {
			return // no member online: what it claimed went back
		}
		b.mu.Lock()
		again := b.draining[sh]
		done := !again && b.unsettled[sh] == 0 && len(b.shareQ) == 0 && b.queueEmptyLocked(sh)
		b.mu.Unlock()
		if done {
			return
		}
		if !again {
			time.Sleep(time.Millisecond) // a write to the queue is under way
		}
	}
}

// queueEmptyLocked reports whether share sh's queue is empty (or cannot
// be read). b.mu held: a read of the store, once at the end of a drain.
func (b *Broker) queueEmptyLocked(sh topic.Share) bool {
	empty := true
	err := b.db.Range(b.ctx, tableShareQ, session.ShareMembers(sh.Group, sh.Filter), func(r table.Record) bool {
		empty = r.Deleted
		return empty
	})
	return empty || err != nil
}

// drainShareOnce claims the queue of sh in batches (each queued message
// deleted by exactly one claim, on any node) and offers each message to
// an online member, until the queue is empty. With no member online,
// what it claimed goes back to the queue, and it reports false.
func (b *Broker) drainShareOnce(sh topic.Share) bool {
	prefix := session.ShareMembers(sh.Group, sh.Filter)
	for b.ctx.Err() == nil {
		var recs []table.Record
		err := b.db.Range(b.ctx, tableShareQ, prefix, func(r table.Record) bool {
			if !r.Deleted {
				recs = append(recs, r)
			}
			return len(recs) < drainBatch
		})
		if err != nil {
			if b.ctx.Err() == nil {
				b.log.Warn("read a shared subscription's queue", "group", sh.Group, "filter", sh.Filter, "err", err)
			}
			return true
		}
		if len(recs) == 0 {
			return true
		}
		claimed := b.claimQueued(recs)
		b.offline.claimed(sh, len(claimed))
		more := b.offerQueued(sh, claimed)
		b.flushShareQueue()
		if !more {
			return false
		}
	}
	return true
}

// claimQueued deletes recs from the queue, each conditional on its being
// there still, and returns those this node deleted: in one commit, or one
// by one when another node claimed some first.
func (b *Broker) claimQueued(recs []table.Record) []table.Record {
	claim := func(rs []table.Record) error {
		tx := b.db.Begin()
		for _, r := range rs {
			tx.ExpectState(tableShareQ, r.ID, r.Version, r.Value)
			tx.DeleteStateUnchecked(tableShareQ, r.ID)
		}
		return tx.Commit(b.ctx)
	}
	err := claim(recs)
	if err == nil {
		return recs
	}
	if !errors.Is(err, engine.ErrConflict) {
		b.log.Warn("claim a shared subscription's queued messages", "err", err)
		return nil
	}
	var out []table.Record
	for _, r := range recs {
		if claim([]table.Record{r}) == nil {
			out = append(out, r)
		}
	}
	return out
}

// offerQueued offers the claimed messages of sh to its online members
// (past the queues' bound: they are owed); with no member online they go
// back to the queue, and it reports false.
func (b *Broker) offerQueued(sh topic.Share, recs []table.Record) bool {
	prefix := session.ShareMembers(sh.Group, sh.Filter)
	b.mu.Lock()
	defer b.mu.Unlock()
	more := true
	now := time.Now()
	members := b.router.Index().Members(sh)
	for _, r := range recs {
		m := new(Message)
		if m.UnmarshalBinary(r.Value) != nil {
			continue
		}
		if m.Expired(now) {
			b.metrics.DroppedExpired.Add(1)
			continue
		}
		pos := queuedPos(r.ID[len(prefix):])
		if len(members) == 0 {
			more = false
			b.queueShareLocked(m, sh, pos)
			continue
		}
		if !b.offerShareLiveLocked(m, members[0], "", true, pos) && b.router.Index().MemberCount(sh) == 0 {
			members = nil // the last member left meanwhile: the rest go back
		}
	}
	return more
}

// settleRouter waits, for at most d, until the router has routed what
// the log held when it was called: a shared group's message committed
// just before a shutdown must reach the group's queue, since the router
// of the next start begins at the log's end.
func (b *Broker) settleRouter(d time.Duration) {
	if b.offline.n.Load() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	head, err := b.head(ctx)
	if err != nil {
		return
	}
	for b.router.Frontier().Below(head) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	b.flushShareQueue()
}

// dropOrphanQueues deletes the queues of the shares this node counts
// messages for that no stored session subscribes to any more (their
// members expired or unsubscribed), and forgets those shares' offline
// members, whose sessions the store no longer has. A retention pass
// runs it.
func (b *Broker) dropOrphanQueues(ctx context.Context) error {
	b.offline.mu.Lock()
	shares := make([]topic.Share, 0, len(b.offline.queued))
	for sh := range b.offline.queued {
		shares = append(shares, sh)
	}
	b.offline.mu.Unlock()
	for _, sh := range shares {
		if b.router.Index().MemberCount(sh) > 0 {
			// A message queued while members came online (on a
			// cluster, by a node that had not seen them yet) waits for
			// no next arrival.
			b.startDrain(sh, "")
			continue
		}
		members := false
		err := b.rangeAll(ctx, session.SharesTable, session.ShareMembers(sh.Group, sh.Filter), func(_ int, r table.Record) bool {
			members = !r.Deleted
			return !members
		})
		if err != nil {
			return err
		}
		if members {
			continue
		}
		var recs []table.Record
		prefix := session.ShareMembers(sh.Group, sh.Filter)
		if err := b.db.Range(ctx, tableShareQ, prefix, func(r table.Record) bool {
			recs = append(recs, r)
			return true
		}); err != nil {
			return err
		}
		// Claimed, not deleted blindly, so that of several nodes
		// dropping the queue each counts only the messages it deleted.
		dropped := 0
		for len(recs) > 0 {
			n := min(len(recs), b.maxStateDeletes())
			dropped += len(b.claimQueued(recs[:n]))
			recs = recs[n:]
		}
		b.offline.forget(sh)
		if dropped > 0 {
			b.metrics.DroppedNoMember.Add(uint64(dropped))
			b.log.Warn("shared subscription group has no members left: its queued messages are dropped", "group", sh.Group, "filter", sh.Filter, "messages", dropped)
			continue
		}
		b.log.Info("shared subscription group has no members left: its queue is deleted", "group", sh.Group, "filter", sh.Filter)
	}
	return nil
}
