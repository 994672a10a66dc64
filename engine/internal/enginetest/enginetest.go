// Package enginetest holds checks the engines' own tests share.
package enginetest

import (
	"context"

	"github.com/tidemark-io/tidemark/engine"
)

// TB is the part of testing.TB the checks use.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// CheckCommitted checks that every commit named in ids is in e: its log
// entry (the id as the entry's value) and its key "k/<id>", and that the
// log's keys never go down. when names the moment in the messages.
func CheckCommitted(t TB, ctx context.Context, e engine.Engine, ids []string, when string) {
	t.Helper()
	seen := map[string]bool{}
	var last engine.LogKey
	err := e.ScanLog(ctx, 0, false, func(en engine.Entry) bool {
		if en.Key < last {
			t.Errorf("%s: log key %d after %d", when, en.Key, last)
		}
		last = en.Key
		seen[string(en.Value)] = true
		return true
	})
	if err != nil {
		t.Fatalf("%s: scan: %v", when, err)
	}
	for _, id := range ids {
		if !seen[id] {
			t.Errorf("%s: completed commit %s is not in the log", when, id)
		}
		if _, err := engine.Get(ctx, e, []byte("k/"+id)); err != nil {
			t.Errorf("%s: key of completed commit %s: %v", when, id, err)
		}
	}
}
