package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

func commit(t T, e engine.Engine, b *engine.Batch) engine.Result {
	t.Helper()
	res, err := engine.Commit(t.Context(), e, b)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	return res
}

func get(t T, e engine.Engine, key string) ([]byte, bool) {
	t.Helper()
	v, err := engine.Get(t.Context(), e, []byte(key))
	if errors.Is(err, engine.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return v, true
}

func wantValue(t T, e engine.Engine, key, want string) {
	t.Helper()
	v, ok := get(t, e, key)
	if !ok {
		t.Fatalf("get %q: absent, want %q", key, want)
	}
	if string(v) != want {
		t.Fatalf("get %q = %q, want %q", key, v, want)
	}
}

func wantAbsent(t T, e engine.Engine, key string) {
	t.Helper()
	if v, ok := get(t, e, key); ok {
		t.Fatalf("get %q = %q, want absent", key, v)
	}
}

func scanAll(t T, e engine.Engine, from engine.LogKey, exclusive bool) []engine.Entry {
	t.Helper()
	out, err := scan(t.Context(), e, from, exclusive)
	if err != nil {
		t.Fatalf("scan log from %d (exclusive=%v): %v", from, exclusive, err)
	}
	return out
}

func scan(ctx context.Context, e engine.Engine, from engine.LogKey, exclusive bool) ([]engine.Entry, error) {
	var out []engine.Entry
	err := e.ScanLog(ctx, from, exclusive, func(en engine.Entry) bool {
		out = append(out, en)
		return true
	})
	return out, err
}

func values(es []engine.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.Value)
	}
	return out
}

func wantErr(t T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkLogOrder verifies the scan invariants every engine keeps: keys never
// decrease; entries of one key have indexes 0..Count-1 in order and agree
// on Count; per-record engines give each entry its own key.
func checkLogOrder(g engine.Granularity, es []engine.Entry) error {
	for i, e := range es {
		if i == 0 {
			if e.Index != 0 {
				return fmt.Errorf("first entry %d has index %d", e.Key, e.Index)
			}
			continue
		}
		p := es[i-1]
		switch {
		case e.Key < p.Key:
			return fmt.Errorf("entry %d: key %d after %d", i, e.Key, p.Key)
		case e.Key == p.Key:
			if g == engine.PerRecord {
				return fmt.Errorf("per-record engine repeated key %d", e.Key)
			}
			if e.Index != p.Index+1 || e.Count != p.Count {
				return fmt.Errorf("key %d: entry %d/%d after %d/%d", e.Key, e.Index, e.Count, p.Index, p.Count)
			}
		default:
			if !p.Last() {
				return fmt.Errorf("key %d ended at entry %d of %d", p.Key, p.Index, p.Count)
			}
			if e.Index != 0 {
				return fmt.Errorf("key %d starts at index %d", e.Key, e.Index)
			}
		}
	}
	if n := len(es); n > 0 && !es[n-1].Last() {
		return fmt.Errorf("last key %d ends at entry %d of %d", es[n-1].Key, es[n-1].Index, es[n-1].Count)
	}
	return nil
}

func bytesOf(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }
