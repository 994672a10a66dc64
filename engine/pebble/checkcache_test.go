package pebble

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
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
	st := cc.m[string(key)]
	cc.applied([]driver.Op{{Kind: driver.OpDelete, Key: key}})
	if cached, err := eval(driver.Check{Key: key, Absent: true}); !cached || err != nil {
		t.Fatalf("after a delete: cached %v, %v", cached, err)
	}
	if cc.m[string(key)] != st {
		t.Fatal("an apply replaced the entry instead of updating it")
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
