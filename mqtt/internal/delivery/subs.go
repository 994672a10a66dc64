package delivery

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// A session's subscriptions, as SUBSCRIBE and UNSUBSCRIBE change them: the
// session's list (persisted in its record), the since position of each
// plain filter, the replays and table feeds of its filters, and its
// entries in the router's index.

// NewSubscription is a subscription a SUBSCRIBE asks for, with the
// replay opened for it (StartReplay; nil for none).
type NewSubscription struct {
	Sub    topic.Subscription
	Replay *Replay
}

// AddSubscriptions adds the subscriptions of one SUBSCRIBE in order,
// each replacing the subscription with its filter and group (existed[i]),
// under one hold of the session's lock: the route matches the session
// against all of them or none. A new plain filter matches only messages
// after the log position since. A replay's live deliveries are held back
// from here on, before the route can match its filter. mayAdd, told how
// many subscriptions the session holds, decides whether a new one is
// allowed; added[i] is false when it is not, and that one changed
// nothing.
//
// A new shared subscription of a session on the route is told to
// Env.Joined, which hands the group's queue over.
func (o *Session) AddSubscriptions(subs []NewSubscription, since logpos.Vec, mayAdd func(have int) bool) (existed, added []bool) {
	existed, added = make([]bool, len(subs)), make([]bool, len(subs))
	if o.env.Joined != nil {
		var shares []topic.Subscription
		for _, ns := range subs {
			if ns.Sub.Group != "" {
				shares = append(shares, ns.Sub)
			}
		}
		o.mu.Lock()
		joined := o.sub != nil
		o.mu.Unlock()
		if joined && len(shares) > 0 {
			o.env.Joined(o.client, shares) // before the route can match them
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, ns := range subs {
		existed[i], added[i] = o.addSubscriptionLocked(ns.Sub, since, ns.Replay, mayAdd)
	}
	return existed, added
}

func (o *Session) addSubscriptionLocked(s topic.Subscription, since logpos.Vec, rp *Replay, mayAdd func(have int) bool) (existed, added bool) {
	for j := range o.subs {
		if o.subs[j].Filter == s.Filter && o.subs[j].Group == s.Group {
			o.subs[j], existed = s, true
		}
	}
	if !existed && !mayAdd(len(o.subs)) {
		return false, false
	}
	if !existed {
		o.subs = append(o.subs, s)
		if s.Group == "" {
			o.since.set(s.Filter, since)
		}
	}
	if rp != nil {
		o.addReplayLocked(rp)
	}
	if s.Group != "" {
		o.env.Router.StartShared() // before the route can match it
	}
	o.env.Router.Index().Add(s)
	return existed, true
}

// RemoveSubscription removes the subscription to filter in group (""
// for a plain one) with its replay and table feed, reporting whether
// there was one.
func (o *Session) RemoveSubscription(group, filter string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for j := range o.subs {
		if o.subs[j].Filter != filter || o.subs[j].Group != group {
			continue
		}
		o.subs = append(o.subs[:j], o.subs[j+1:]...)
		if group == "" {
			o.since.del(filter)
			o.dropReplayLocked(filter)
			o.dropTableFeedLocked(filter)
		}
		o.env.Router.Index().Remove(o.client, group, filter)
		return true
	}
	return false
}

// LockRecord holds back every other write of the session record until
// UnlockRecord: a caller building a write of it (SessionTx) holds it
// until the write is submitted, so the record's writes commit in the
// order they were built.
func (o *Session) LockRecord() { o.recordMu.Lock() }

// UnlockRecord ends LockRecord.
func (o *Session) UnlockRecord() { o.recordMu.Unlock() }

// AskPersist asks the sender for a checkpoint write even if the
// checkpoint moved only over other sessions' messages: retention wants
// it, to let go of the log below.
func (o *Session) AskPersist() {
	o.asked.Store(true)
	o.requestPersist()
}
