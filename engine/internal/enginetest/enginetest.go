// Package enginetest holds checks the engines' own tests share.
package enginetest

import (
	"context"
	"maps"
	"slices"
	"sync"

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

// Committer commits one key and log entry per id and keeps the ids whose
// commits completed: what a store must still hold after a failure. It is
// safe for concurrent use.
type Committer struct {
	E         engine.Engine
	ValueSize int

	mu    sync.Mutex
	acked map[string]bool
}

// Commit writes "k/<id>" (ValueSize bytes) and appends id to the log, waits
// for the commit and, when it completed, records id.
func (c *Committer) Commit(ctx context.Context, id string) error {
	b := &engine.Batch{}
	b.Put([]byte("k/"+id), make([]byte, c.ValueSize))
	b.Append([]byte(id))
	h, err := c.E.Submit(ctx, b)
	if err != nil {
		return err
	}
	if _, err := h.Wait(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acked == nil {
		c.acked = map[string]bool{}
	}
	c.acked[id] = true
	return nil
}

// Completed returns the ids whose commits completed.
func (c *Committer) Completed() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.acked))
}
