package pebble

import (
	"bytes"
	"fmt"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// maxCheckCache bounds the keys a checkCache holds; past it, it starts
// over empty.
const maxCheckCache = 1 << 16

// checkCache holds the latest applied state of the keys commits' checks
// read. Pebble answers a Get of a key from the newest of its versions
// still in the memtable, walking past every older one when the newest is
// a deletion: a key written and deleted at every message (an MQTT client's
// QoS 2 slot for packet id 1, reused by a client that sends one message at
// a time) made each check walk thousands of versions, and a QoS 2
// exchange cost a millisecond of CPU. From the cache a check costs a map
// lookup.
//
// The cache is exact: its owner holds db.mu across every check and every
// apply, every applied op on a cached key updates its entry, and an apply
// whose outcome is unknown (it failed, or the store was reopened) empties
// it. A key enters when a check reads it from the store.
type checkCache struct {
	m map[string]cachedState
}

// cachedState is a key's latest applied state.
type cachedState struct {
	present bool
	value   []byte
}

// eval evaluates check c from the cache; cached is false when the key is
// not cached (and err nil).
func (cc *checkCache) eval(c *driver.Check) (cached bool, err error) {
	st, ok := cc.m[string(c.Key)]
	if !ok {
		return false, nil
	}
	switch {
	case !st.present && !c.Absent:
		return true, fmt.Errorf("pebble: %w: key %q is absent", driver.ErrConflict, c.Key)
	case st.present && (c.Absent || !bytes.Equal(st.value, c.Value)):
		return true, fmt.Errorf("pebble: %w: key %q holds another value", driver.ErrConflict, c.Key)
	}
	return true, nil
}

// learn records what a check read from the store for key.
func (cc *checkCache) learn(key []byte, present bool, value []byte) {
	if cc.m == nil || len(cc.m) >= maxCheckCache {
		cc.m = make(map[string]cachedState)
	}
	cc.m[string(key)] = cachedState{present: present, value: bytes.Clone(value)}
}

// applied updates the cached keys that ops, just applied, wrote.
func (cc *checkCache) applied(ops []driver.Op) {
	if len(cc.m) == 0 {
		return
	}
	for i := range ops {
		op := &ops[i]
		if _, ok := cc.m[string(op.Key)]; ok {
			if op.Kind == driver.OpPut {
				cc.m[string(op.Key)] = cachedState{present: true, value: bytes.Clone(op.Value)}
			} else {
				cc.m[string(op.Key)] = cachedState{}
			}
		}
	}
}

// reset empties the cache: the store's state is not known to match it.
func (cc *checkCache) reset() { cc.m = nil }
