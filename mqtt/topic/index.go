package topic

import (
	"strings"
	"sync"
)

// Subscription is one client's subscription to one filter.
type Subscription struct {
	Client string
	// Filter is the topic filter without any "$share/group/" prefix.
	Filter string
	// Group is the shared-subscription group, or "" for a plain one.
	Group string
	QoS   byte
	// NoLocal, RetainAsPublished and RetainHandling are the 5.0
	// subscription options.
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	// ID is the 5.0 subscription identifier, 0 when none.
	ID uint32
}

// FullFilter is the filter as the client subscribed, with any share prefix.
func (s Subscription) FullFilter() string {
	if s.Group == "" {
		return s.Filter
	}
	return "$share/" + s.Group + "/" + s.Filter
}

type subKey struct{ client, group string }

type node struct {
	children map[string]*node
	subs     map[subKey]Subscription
}

// Index is a trie of subscriptions by filter level. It is safe for
// concurrent use; Match takes a read lock only (plus a short lock for the
// shared-group rotation).
type Index struct {
	mu   sync.RWMutex
	root node
	// rr rotates deliveries among a shared group's members.
	rrMu sync.Mutex
	rr   map[string]uint64
}

// Add adds or replaces s (one subscription per client, group and filter)
// and reports whether it replaced an existing one [MQTT-3.8.4-3].
func (ix *Index) Add(s Subscription) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := &ix.root
	for _, lvl := range strings.Split(s.Filter, "/") {
		if n.children == nil {
			n.children = map[string]*node{}
		}
		c := n.children[lvl]
		if c == nil {
			c = &node{}
			n.children[lvl] = c
		}
		n = c
	}
	if n.subs == nil {
		n.subs = map[subKey]Subscription{}
	}
	k := subKey{s.Client, s.Group}
	_, existed := n.subs[k]
	n.subs[k] = s
	return existed
}

// Remove deletes client's subscription to filter in group and reports
// whether it existed.
func (ix *Index) Remove(client, group, filter string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return remove(&ix.root, strings.Split(filter, "/"), subKey{client, group})
}

func remove(n *node, levels []string, k subKey) bool {
	if len(levels) == 0 {
		_, ok := n.subs[k]
		delete(n.subs, k)
		return ok
	}
	c := n.children[levels[0]]
	if c == nil {
		return false
	}
	ok := remove(c, levels[1:], k)
	if len(c.subs) == 0 && len(c.children) == 0 {
		delete(n.children, levels[0])
	}
	return ok
}

// RemoveClient deletes every subscription of client. It walks the whole
// index: a caller that knows the client's filters removes them with Remove.
func (ix *Index) RemoveClient(client string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	removeClient(&ix.root, client)
}

func removeClient(n *node, client string) {
	for k := range n.subs {
		if k.client == client {
			delete(n.subs, k)
		}
	}
	for lvl, c := range n.children {
		removeClient(c, client)
		if len(c.subs) == 0 && len(c.children) == 0 {
			delete(n.children, lvl)
		}
	}
}

// Match calls fn for every subscription whose filter matches name: every
// plain subscription, and for each shared group one member, rotating.
func (ix *Index) Match(name string, fn func(Subscription)) {
	var shared map[string][]Subscription
	ix.mu.RLock()
	collect(&ix.root, strings.Split(name, "/"), name != "" && name[0] == '$', true, func(s Subscription) {
		if s.Group == "" {
			fn(s)
			return
		}
		if shared == nil {
			shared = map[string][]Subscription{}
		}
		key := s.Group + "\x00" + s.Filter
		shared[key] = append(shared[key], s)
	})
	ix.mu.RUnlock()
	for key, members := range shared {
		ix.rrMu.Lock()
		if ix.rr == nil {
			ix.rr = map[string]uint64{}
		}
		i := ix.rr[key]
		ix.rr[key] = i + 1
		ix.rrMu.Unlock()
		// Members are collected from a map: order them for a fair rotation.
		sortSubs(members)
		fn(members[i%uint64(len(members))])
	}
}

func collect(n *node, levels []string, dollar, first bool, fn func(Subscription)) {
	if c := n.children["#"]; c != nil && !(first && dollar) {
		for _, s := range c.subs {
			fn(s)
		}
	}
	if len(levels) == 0 {
		for _, s := range n.subs {
			fn(s)
		}
		return
	}
	if c := n.children[levels[0]]; c != nil {
		collect(c, levels[1:], dollar, false, fn)
	}
	if c := n.children["+"]; c != nil && !(first && dollar) {
		collect(c, levels[1:], dollar, false, fn)
	}
}

func sortSubs(s []Subscription) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Client < s[j-1].Client; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Subscriptions returns every subscription of client.
func (ix *Index) Subscriptions(client string) []Subscription {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []Subscription
	var walk func(n *node)
	walk = func(n *node) {
		for k, s := range n.subs {
			if k.client == client {
				out = append(out, s)
			}
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	walk(&ix.root)
	return out
}
