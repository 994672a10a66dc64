package pebble

import (
	"bytes"
	"fmt"
	"hash/maphash"

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

// Bounds of a checkCache's arena, where its keys and values live: it
// starts small and doubles, up to maxCheckArena, each time it fills
// before the cache's key count does.
const (
	minCheckArena = 64 << 10
	maxCheckArena = 4 << 20
)

// checkCache holds the latest applied state of the keys commits' checks
// read. Pebble answers a Get of a key from the newest of its versions
// still in the memtable, walking past every older one when the newest is
// a deletion: a key written and deleted at every message (an MQTT client's
// QoS 2 slot for packet id 1, reused by a client that sends one message at
// a time) made each check walk thousands of versions, and a QoS 2
// exchange cost a millisecond of CPU. From the cache a check costs a hash
// and a map lookup.
//
// The cache is exact: its owner holds db.mu across every check and every
// apply, every applied op on a cached key updates its entry, and an apply
// whose outcome is unknown (it failed, or the store was reopened) empties
// it. A key enters when a check reads it from the store, and only while
// its value is at most maxCachedValue long.
//
// It allocates nothing per key once warm: keys and values are copied into
// one arena and entries kept in one slice, indexed by a map from the key's
// hash, and all three are emptied, not dropped, when the cache starts
// over. A pipelining client checks a new staging slot at every message,
// so a cache of separately allocated keys and entries cost two
// allocations per QoS 2 exchange.
type checkCache struct {
	idx   map[uint64]int32 // a key's hash: its newest entry in ents
	ents  []cachedState
	arena []byte // never grown past its capacity: ents point into it
	seed  maphash.Seed
}

// cachedState is a key's latest applied state.
type cachedState struct {
	key   []byte // in the arena
	value []byte // in the arena, with its slot's capacity; empty when absent
	// present says the key holds value; gone that the entry no longer
	// speaks for the key (its value grew past maxCachedValue).
	present, gone bool
	next          int32 // the next older entry of the same hash, or -1
}

// find returns the entry of key, or nil.
func (cc *checkCache) find(key []byte) *cachedState {
	if len(cc.ents) == 0 {
		return nil
	}
	i, ok := cc.idx[maphash.Bytes(cc.seed, key)]
	for ok && i >= 0 {
		st := &cc.ents[i]
		if !st.gone && bytes.Equal(st.key, key) {
			return st
		}
		i = st.next
	}
	return nil
}

// eval evaluates check c from the cache; cached is false when the key is
// not cached (and err nil).
func (cc *checkCache) eval(c *driver.Check) (cached bool, err error) {
	st := cc.find(c.Key)
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
	if len(cc.ents) >= maxCheckCache || len(cc.arena)+len(key)+len(value) > cap(cc.arena) {
		cc.startOver()
		if len(key)+len(value) > cap(cc.arena) {
			return
		}
	}
	h := maphash.Bytes(cc.seed, key)
	next, ok := cc.idx[h]
	if !ok {
		next = -1
	}
	st := cachedState{key: cc.store(key), present: present, next: next}
	if present {
		st.value = cc.store(value)
	}
	cc.idx[h] = int32(len(cc.ents)) //nolint:gosec // at most maxCheckCache
	cc.ents = append(cc.ents, st)
}

// store copies b into the arena (which has room: see learn and setValue)
// and returns the copy, capped at its length.
func (cc *checkCache) store(b []byte) []byte {
	at := len(cc.arena)
	cc.arena = append(cc.arena, b...)
	return cc.arena[at:len(cc.arena):len(cc.arena)]
}

// setValue makes v st's value: in place when its slot is large enough,
// else in a new slot, or, with the arena full, by taking the key out of
// the cache (its next check reads the store).
func (cc *checkCache) setValue(st *cachedState, v []byte) {
	st.present = true
	switch {
	case len(v) <= cap(st.value):
		st.value = append(st.value[:0], v...)
	case len(cc.arena)+len(v) <= cap(cc.arena):
		st.value = cc.store(v)
	default:
		st.gone = true
	}
}

// applied updates the cached keys that ops, just applied, wrote.
func (cc *checkCache) applied(ops []driver.Op) {
	if len(cc.ents) == 0 {
		return
	}
	for i := range ops {
		op := &ops[i]
		st := cc.find(op.Key)
		switch {
		case st == nil:
		case op.Kind == driver.OpPut && len(op.Value) > maxCachedValue:
			st.gone = true
		case op.Kind == driver.OpPut:
			cc.setValue(st, op.Value)
		default:
			st.present, st.value = false, st.value[:0]
		}
	}
}

// startOver empties the cache, keeping its memory; an arena that filled
// before the key count did is replaced by one twice as large.
func (cc *checkCache) startOver() {
	if cc.idx == nil {
		cc.idx = make(map[uint64]int32)
		cc.seed = maphash.MakeSeed()
	}
	if len(cc.ents) < maxCheckCache && cap(cc.arena) < maxCheckArena {
		cc.arena = make([]byte, 0, min(max(2*cap(cc.arena), minCheckArena), maxCheckArena))
	}
	cc.reset()
}

// reset empties the cache: the store's state is not known to match it.
func (cc *checkCache) reset() {
	if cc.idx != nil {
		clear(cc.idx)
	}
	cc.ents = cc.ents[:0]
	cc.arena = cc.arena[:0]
}
