//go:build !nojetstream

package jetstream

import "hash/maphash"

// version is the latest message of one data subject: the value it stored
// (or a delete marker) and its stream sequence, which a commit that checks
// the key sends as its expected last subject sequence.
type version struct {
	seq     uint64
	val     []byte
	deleted bool
}

// node is a node of an immutable treap keyed by user key. Updates copy the
// path they change and leave every older root intact, so a snapshot is a
// root pointer: readers never lock and never see a later commit. A node
// made by an update in edit epoch e (see withIn) may be changed in place
// by later updates of the same epoch: no root anyone holds reaches it yet.
type node struct {
	key         string
	v           version
	prio        uint64
	epoch       uint64 // 0: shared from the start, never changed in place
	left, right *node
}

// index is an ordered map from key to version built from immutable treap
// roots. The zero value is empty.
type index struct {
	root *node
	seed maphash.Seed
}

func newIndex() index { return index{seed: maphash.MakeSeed()} }

// with returns the index with key set to v; ix itself is unchanged.
func (ix index) with(key string, v version) index {
	return ix.withIn(key, v, 0)
}

// withIn is with for a run of updates that publish only their last
// result: the nodes the run made (epoch e, non-zero and unique to the run)
// are changed in place rather than copied again, so a run of many keys
// allocates each changed path once. No root returned during the run may
// be handed to a reader before the run ends.
func (ix index) withIn(key string, v version, e uint64) index {
	ix.root = insert(ix.root, key, v, maphash.String(ix.seed, key), e)
	return ix
}

// own returns n itself when edit epoch e made it, else a copy made in e.
func own(n *node, e uint64) *node {
	if e != 0 && n.epoch == e {
		return n
	}
	c := *n
	c.epoch = e
	return &c
}

// withoutIn returns the index without key, in edit epoch e (see withIn;
// 0 copies every node it changes).
func (ix index) withoutIn(key string, e uint64) index {
	ix.root, _ = remove(ix.root, key, e)
	return ix
}

func remove(n *node, key string, e uint64) (*node, bool) {
	if n == nil {
		return nil, false
	}
	if key == n.key {
		return join(n.left, n.right, e), true
	}
	if key < n.key {
		l, found := remove(n.left, key, e)
		if !found {
			return n, false
		}
		c := own(n, e)
		c.left = l
		return c, true
	}
	r, found := remove(n.right, key, e)
	if !found {
		return n, false
	}
	c := own(n, e)
	c.right = r
	return c, true
}

// join merges two treaps whose keys are all below (a) and above (b) one
// another.
func join(a, b *node, e uint64) *node {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.prio > b.prio:
		c := own(a, e)
		c.right = join(a.right, b, e)
		return c
	default:
		c := own(b, e)
		c.left = join(a, b.left, e)
		return c
	}
}

func insert(n *node, key string, v version, prio, e uint64) *node {
	if n == nil {
		return &node{key: key, v: v, prio: prio, epoch: e}
	}
	c := own(n, e)
	switch {
	case key == c.key:
		c.v = v
	case key < c.key:
		c.left = insert(c.left, key, v, prio, e)
		if c.left.prio > c.prio {
			// c.left is this run's node, so rotating through it
			// changes nothing another root shares.
			l := c.left
			c.left = l.right
			l.right = c
			return l
		}
	default:
		c.right = insert(c.right, key, v, prio, e)
		if c.right.prio > c.prio {
			r := c.right
			c.right = r.left
			r.left = c
			return r
		}
	}
	return c
}

// get returns the version stored under key.
func (ix index) get(key string) (version, bool) {
	n := ix.root
	for n != nil {
		switch {
		case key == n.key:
			return n.v, true
		case key < n.key:
			n = n.left
		default:
			n = n.right
		}
	}
	return version{}, false
}

// cursor walks an index in key order from a lower bound.
type cursor struct {
	stack []*node
}

// seek positions the cursor at the first key >= lower.
func (ix index) seek(lower string) *cursor {
	c := &cursor{}
	n := ix.root
	for n != nil {
		if n.key >= lower {
			c.stack = append(c.stack, n)
			n = n.left
		} else {
			n = n.right
		}
	}
	return c
}

// next returns the next node, or nil at the end.
func (c *cursor) next() *node {
	if len(c.stack) == 0 {
		return nil
	}
	n := c.stack[len(c.stack)-1]
	c.stack = c.stack[:len(c.stack)-1]
	for m := n.right; m != nil; m = m.left {
		c.stack = append(c.stack, m)
	}
	return n
}
