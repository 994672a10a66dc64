package pebble

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"pgregory.net/rapid"
)

// TestCheckCacheFollowsApplies: a cached key follows every put and delete
// applied to it, reusing its entry, and a value too long to keep takes
// the key out of the cache, so its next check reads the store.
func TestCheckCacheFollowsApplies(t *testing.T) {
	var cc checkCache
	key := []byte("slot")
	cc.learn(key, false, nil)
	eval := func(c driver.Check) (bool, error) {
		t.Helper()
		return cc.eval(&c)
	}
	if cached, err := eval(driver.Check{Key: key, Absent: true}); !cached || err != nil {
		t.Fatalf("absent key learned: cached %v, %v", cached, err)
	}
	short := []byte("staged")
	cc.applied([]driver.Op{{Kind: driver.OpPut, Key: key, Value: short}})
	if cached, err := eval(driver.Check{Key: key, Value: short}); !cached || err != nil {
		t.Fatalf("after a put: cached %v, %v", cached, err)
	}
	if _, err := eval(driver.Check{Key: key, Value: []byte("other")}); !errors.Is(err, driver.ErrConflict) {
		t.Fatalf("another value: %v, want a conflict", err)
	}
	cc.applied([]driver.Op{{Kind: driver.OpDelete, Key: key}})
	if cached, err := eval(driver.Check{Key: key, Absent: true}); !cached || err != nil {
		t.Fatalf("after a delete: cached %v, %v", cached, err)
	}
	arena := len(cc.arena)
	cc.applied([]driver.Op{{Kind: driver.OpPut, Key: key, Value: []byte("again")}})
	if len(cc.ents) != 1 || len(cc.arena) != arena {
		t.Fatalf("an apply added an entry or a value slot instead of updating the key's: %d entries, arena %d bytes, was %d", len(cc.ents), len(cc.arena), arena)
	}
	long := bytes.Repeat([]byte("x"), maxCachedValue+1)
	cc.applied([]driver.Op{{Kind: driver.OpPut, Key: key, Value: long}})
	if cached, _ := eval(driver.Check{Key: key, Value: long}); cached {
		t.Fatal("a value longer than maxCachedValue is still cached")
	}
	cc.learn(key, true, long)
	if cached, _ := eval(driver.Check{Key: key, Value: long}); cached {
		t.Fatal("a check learned a value longer than maxCachedValue")
	}
}

// TestCheckCacheIsExact drives a cache through random checks and applies
// over keys of one small set, against a model of the store: every check
// the cache answers gets the store's answer, through arenas that fill
// (long values), a key count past maxCheckCache (bursts of fresh keys)
// and resets.
func TestCheckCacheIsExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var cc checkCache
		store := map[string][]byte{} // the model: a key's value, absent when missing
		keys := rapid.IntRange(1, 40).Draw(t, "keys")
		key := func(label string) []byte {
			return fmt.Appendf(nil, "slot-%d", rapid.IntRange(0, keys-1).Draw(t, label))
		}
		value := func() []byte {
			n := rapid.SampledFrom([]int{0, 3, 40, maxCachedValue, maxCachedValue + 1, 4 << 10}).Draw(t, "len")
			return bytes.Repeat([]byte{byte(rapid.IntRange('a', 'z').Draw(t, "byte"))}, n)
		}
		bursts := rapid.IntRange(0, 1).Draw(t, "bursts")
		for step := range rapid.IntRange(1, 300).Draw(t, "steps") {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0: // a check, read from the store when not cached
				k := key("check")
				c := driver.Check{Key: k, Absent: rapid.Bool().Draw(t, "absent")}
				if !c.Absent {
					if rapid.Bool().Draw(t, "stored value") {
						c.Value = store[string(k)]
					} else {
						c.Value = value()
					}
				}
				v, present := store[string(k)]
				want := present == !c.Absent && (c.Absent || bytes.Equal(v, c.Value))
				cached, err := cc.eval(&c)
				if !cached {
					cc.learn(k, present, v)
					continue
				}
				if (err == nil) != want {
					t.Fatalf("step %d: check %+v of a key holding %q (present %v): cache says %v", step, c, v, present, err)
				}
			case 1, 2:
				k, v := key("put"), value()
				store[string(k)] = v
				cc.applied([]driver.Op{{Kind: driver.OpPut, Key: k, Value: v}})
			case 3:
				k := key("delete")
				delete(store, string(k))
				cc.applied([]driver.Op{{Kind: driver.OpDelete, Key: k}})
			case 4: // fresh keys, as a pipelining client's staging slots
				if bursts == 0 {
					continue
				}
				bursts--
				for i := range rapid.IntRange(1, 3).Draw(t, "fresh") * maxCheckCache / 2 {
					cc.learn(fmt.Appendf(nil, "fresh-%d-%d", step, i), false, nil)
				}
			case 5: // an apply whose outcome is unknown
				cc.reset()
			}
		}
	})
}
