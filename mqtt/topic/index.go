package topic

import (
	"slices"
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

// smallNode is how many children or subscriptions a node keeps in a plain
// slice, searched in order; past it a map indexes them. Most nodes of a
// fleet's index hold one child or one subscription (a device's own
// topic), and a map, even a small one, costs several times their size.
const smallNode = 8

type child struct {
	level string
	n     *node
}

// node is one filter level. Its children and subscriptions live in
// slices; kidIdx and subIdx, made once a slice outgrows smallNode, map a
// level or a subscription's key to its place in the slice.
type node struct {
	kids   []child
	kidIdx map[string]int
	subs   []Subscription
	subIdx map[subKey]int
}

func (n *node) child(level string) *node {
	if n.kidIdx != nil {
		if i, ok := n.kidIdx[level]; ok {
			return n.kids[i].n
		}
		return nil
	}
	for i := range n.kids {
		if n.kids[i].level == level {
			return n.kids[i].n
		}
	}
	return nil
}

func (n *node) addChild(level string) *node {
	c := &node{}
	n.kids = append(n.kids, child{level, c})
	if n.kidIdx != nil {
		n.kidIdx[level] = len(n.kids) - 1
	} else if len(n.kids) > smallNode {
		n.kidIdx = make(map[string]int, len(n.kids))
		for i, k := range n.kids {
			n.kidIdx[k.level] = i
		}
	}
	return c
}

func (n *node) removeChild(level string) {
	i := -1
	if n.kidIdx != nil {
		if j, ok := n.kidIdx[level]; ok {
			i = j
			delete(n.kidIdx, level)
		}
	} else {
		for j := range n.kids {
			if n.kids[j].level == level {
				i = j
				break
			}
		}
	}
	if i < 0 {
		return
	}
	last := len(n.kids) - 1
	if i != last {
		n.kids[i] = n.kids[last]
		if n.kidIdx != nil {
			n.kidIdx[n.kids[i].level] = i
		}
	}
	n.kids[last] = child{}
	n.kids = n.kids[:last]
	n.kids, n.kidIdx = shrink(n.kids), shrinkIdx(n.kidIdx, len(n.kids))
}

func (n *node) findSub(k subKey) int {
	if n.subIdx != nil {
		if i, ok := n.subIdx[k]; ok {
			return i
		}
		return -1
	}
	for i := range n.subs {
		if n.subs[i].Client == k.client && n.subs[i].Group == k.group {
			return i
		}
	}
	return -1
}

// putSub adds or replaces s, reporting whether it replaced one.
func (n *node) putSub(s Subscription) bool {
	k := subKey{s.Client, s.Group}
	if i := n.findSub(k); i >= 0 {
		n.subs[i] = s
		return true
	}
	n.subs = append(n.subs, s)
	if n.subIdx != nil {
		n.subIdx[k] = len(n.subs) - 1
	} else if len(n.subs) > smallNode {
		n.subIdx = make(map[subKey]int, len(n.subs))
		for i, s := range n.subs {
			n.subIdx[subKey{s.Client, s.Group}] = i
		}
	}
	return false
}

// dropSub removes the subscription at i, moving the last one into its
// place.
func (n *node) dropSub(i int) {
	if n.subIdx != nil {
		delete(n.subIdx, subKey{n.subs[i].Client, n.subs[i].Group})
	}
	last := len(n.subs) - 1
	if i != last {
		n.subs[i] = n.subs[last]
		if n.subIdx != nil {
			n.subIdx[subKey{n.subs[i].Client, n.subs[i].Group}] = i
		}
	}
	n.subs[last] = Subscription{}
	n.subs = n.subs[:last]
	n.subs, n.subIdx = shrink(n.subs), shrinkIdx(n.subIdx, len(n.subs))
}

func (n *node) empty() bool { return len(n.kids) == 0 && len(n.subs) == 0 }

// shrink lets a slice's array go when it is empty or mostly unused, so a
// node that once held many entries does not keep their room.
func shrink[T any](s []T) []T {
	switch {
	case len(s) == 0:
		return nil
	case cap(s) > 64 && len(s) < cap(s)/4:
		return append([]T(nil), s...)
	}
	return s
}

func shrinkIdx[K comparable](m map[K]int, n int) map[K]int {
	if n <= smallNode/2 {
		return nil // a short slice is searched in order again
	}
	return m
}

// Index is a trie of subscriptions by filter level. It is safe for
// concurrent use; Match takes a read lock only (plus a short lock for the
// shared-group rotation).
type Index struct {
	mu   sync.RWMutex
	root node
	// shares counts the members of each shared subscription in the
	// index (see Shares).
	shares map[Share]int
	// rr rotates deliveries among a shared group's members.
	rrMu sync.Mutex
	rr   map[Share]uint64
}

// Add adds or replaces s (one subscription per client, group and filter)
// and reports whether it replaced an existing one [MQTT-3.8.4-3].
func (ix *Index) Add(s Subscription) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := &ix.root
	for lvl := range strings.SplitSeq(s.Filter, "/") {
		c := n.child(lvl)
		if c == nil {
			c = n.addChild(lvl)
		}
		n = c
	}
	replaced := n.putSub(s)
	if !replaced && s.Group != "" {
		if ix.shares == nil {
			ix.shares = map[Share]int{}
		}
		ix.shares[Share{s.Group, s.Filter}]++
	}
	return replaced
}

// Share names a shared subscription: its group and its filter (without
// the "$share/group/" prefix). Members subscribe to one share, and each
// message matching it goes to one of them.
type Share struct{ Group, Filter string }

// Shares returns how many members each shared subscription in the index
// has (a copy).
func (ix *Index) Shares() map[Share]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	m := make(map[Share]int, len(ix.shares))
	for k, n := range ix.shares {
		m[k] = n
	}
	return m
}

// MemberCount returns how many members share s has in the index.
func (ix *Index) MemberCount(s Share) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.shares[s]
}

// Members returns the subscriptions of share s's members, in client
// order.
func (ix *Index) Members(s Share) []Subscription {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := &ix.root
	for lvl := range strings.SplitSeq(s.Filter, "/") {
		if n = n.child(lvl); n == nil {
			return nil
		}
	}
	var out []Subscription
	for _, sub := range n.subs {
		if sub.Group == s.Group {
			out = append(out, sub)
		}
	}
	sortSubs(out)
	return out
}

// dropShare counts one member of s's share less; ix.mu held.
func (ix *Index) dropShare(s Share) {
	if ix.shares[s] <= 1 {
		delete(ix.shares, s)
		// Its rotation goes with it: groups come and go, and the
		// counters of those gone would pile up.
		ix.rrMu.Lock()
		delete(ix.rr, s)
		ix.rrMu.Unlock()
		return
	}
	ix.shares[s]--
}

// Remove deletes client's subscription to filter in group and reports
// whether it existed.
func (ix *Index) Remove(client, group, filter string) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ok := remove(&ix.root, filter, subKey{client, group})
	if ok && group != "" {
		ix.dropShare(Share{group, filter})
	}
	return ok
}

// remove deletes k from the node of filter below n, pruning the nodes it
// leaves empty.
func remove(n *node, filter string, k subKey) bool {
	lvl, rest, more := strings.Cut(filter, "/")
	c := n.child(lvl)
	if c == nil {
		return false
	}
	ok := false
	if more {
		ok = remove(c, rest, k)
	} else if i := c.findSub(k); i >= 0 {
		c.dropSub(i)
		ok = true
	}
	if c.empty() {
		n.removeChild(lvl)
	}
	return ok
}

// RemoveClient deletes every subscription of client. It walks the whole
// index: a caller that knows the client's filters removes them with Remove.
func (ix *Index) RemoveClient(client string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeClient(&ix.root, client)
}

func (ix *Index) removeClient(n *node, client string) {
	for i := 0; i < len(n.subs); {
		if s := n.subs[i]; s.Client == client {
			if s.Group != "" {
				ix.dropShare(Share{s.Group, s.Filter})
			}
			n.dropSub(i) // moves another into i
			continue
		}
		i++
	}
	for i := 0; i < len(n.kids); {
		k := n.kids[i]
		ix.removeClient(k.n, client)
		if k.n.empty() {
			n.removeChild(k.level) // moves another into i
			continue
		}
		i++
	}
}

// Match calls fn for every subscription whose filter matches name: every
// plain subscription, and for each shared group one member, rotating.
//
// A share's members are counted in one pass and the one whose turn it is
// taken in a second, both over the same nodes in the same order: the cost
// of a share grows with its members by a compare each, and nothing is
// copied or sorted per message (sorting them made a share of 1,000
// members cost 3.9 ms of the router's time per message).
func (ix *Index) Match(name string, fn func(Subscription)) {
	// Most topics have a few levels: split them without allocating.
	var levelBuf [16]string
	levels := levelBuf[:0]
	for rest := name; ; {
		level, more, found := strings.Cut(rest, "/")
		levels = append(levels, level)
		if !found {
			break
		}
		rest = more
	}
	noWild := name != "" && name[0] == '$'
	// The shares matched, with their member counts, then each one's turn:
	// a few at most, searched in order (no hashing per member).
	var shareBuf [4]shareTurn
	shares := shareBuf[:0]
	find := func(s *Subscription) *shareTurn {
		for i := range shares {
			if shares[i].group == s.Group && shares[i].filter == s.Filter {
				return &shares[i]
			}
		}
		shares = append(shares, shareTurn{group: s.Group, filter: s.Filter})
		return &shares[len(shares)-1]
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	collect(&ix.root, levels, noWild, func(s Subscription) {
		if s.Group == "" {
			fn(s)
			return
		}
		find(&s).n++
	})
	if len(shares) == 0 {
		return
	}
	ix.rrMu.Lock()
	if ix.rr == nil {
		ix.rr = map[Share]uint64{}
	}
	for i := range shares {
		k := Share{shares[i].group, shares[i].filter}
		turn := ix.rr[k]
		ix.rr[k] = turn + 1
		shares[i].n = int(turn % uint64(shares[i].n)) // now the turn's place among the members
	}
	ix.rrMu.Unlock()
	collect(&ix.root, levels, noWild, func(s Subscription) {
		if s.Group == "" {
			return
		}
		t := find(&s)
		if t.n == 0 {
			fn(s)
		}
		t.n--
	})
}

// shareTurn is a share Match found: its members' count, then the place
// of the member whose turn it is.
type shareTurn struct {
	group, filter string
	n             int
}

// collect calls fn for the subscriptions under n whose filters match the
// topic levels left. noWild is set at the first level of a topic that
// starts with '$', where '#' and '+' match nothing [MQTT-4.7.2-1]; deeper
// levels take wildcards whatever the topic.
func collect(n *node, levels []string, noWild bool, fn func(Subscription)) {
	if c := n.child("#"); c != nil && !noWild {
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
	if c := n.child(levels[0]); c != nil {
		collect(c, levels[1:], false, fn)
	}
	if c := n.child("+"); c != nil && !noWild {
		collect(c, levels[1:], false, fn)
	}
}

// sortSubs orders s by client.
func sortSubs(s []Subscription) {
	slices.SortFunc(s, func(a, b Subscription) int { return strings.Compare(a.Client, b.Client) })
}

// Subscriptions returns every subscription of client.
func (ix *Index) Subscriptions(client string) []Subscription {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var out []Subscription
	var walk func(n *node)
	walk = func(n *node) {
		for _, s := range n.subs {
			if s.Client == client {
				out = append(out, s)
			}
		}
		for _, c := range n.kids {
			walk(c.n)
		}
	}
	walk(&ix.root)
	return out
}
