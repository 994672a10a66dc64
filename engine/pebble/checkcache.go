package pebble

import (
	"bytes"
	"fmt"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// maxCheckCache bounds the keys a checkCache holds; past it, it starts
// over empty.
const maxCheckCache = 1 << 16

// maxCachedValue bounds the value a checkCache keeps for a key: a key
// holding a longer one is not cached (its checks read the store), so
// the cache holds at most maxCheckCache*maxCachedValue bytes of values
// however large the checked records (a staged QoS 2 message) are.
const maxCachedValue = 256

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
// it. A key enters when a check reads it from the store, and only while
// its value is at most maxCachedValue long.
type checkCache struct {
	// Entries are pointers so that an apply updates them in place: a map
	// assignment would copy the key into a new string, and a new value
	// each time, at every write of a cached key (twice per QoS 2
	// exchange).
	m map[string]*cachedState
}

// cachedState is a key's latest applied state.
type cachedState struct {
	present bool
	value   []byte
}

// eval evaluates check c from the cache; cached is false when the key is
// not cached (and err nil).
func (cc *checkCache) eval(c *driver.Check) (cached bool, err error) {
	st := cc.m[string(c.Key)]
	if st == nil {
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
	if len(value) > maxCachedValue {
		return
	}
	if cc.m == nil || len(cc.m) >= maxCheckCache {
		cc.m = make(map[string]*cachedState)
	}
	cc.m[string(key)] = &cachedState{present: present, value: bytes.Clone(value)}
}

// applied updates the cached keys that ops, just applied, wrote.
func (cc *checkCache) applied(ops []driver.Op) {
	if len(cc.m) == 0 {
		return
	}
	for i := range ops {
		op := &ops[i]
		st := cc.m[string(op.Key)]
		switch {
		case st == nil:
		case op.Kind == driver.OpPut && len(op.Value) > maxCachedValue:
			delete(cc.m, string(op.Key))
		case op.Kind == driver.OpPut:
			st.present, st.value = true, append(st.value[:0], op.Value...)
		default:
			st.present, st.value = false, st.value[:0]
		}
	}
}

// reset empties the cache: the store's state is not known to match it.
func (cc *checkCache) reset() { cc.m = nil }
