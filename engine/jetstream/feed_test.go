//go:build !nojetstream

package jetstream

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// TestJetStreamStalledConsumerRecreated leaves the index consumer of one
// engine standing (its messages no longer apply, as when a consumer
// created during a leader change is never served), commits through a
// second engine, and checks that the first one's watchdog notices,
// recreates the consumer and brings the commit into its index.
func TestJetStreamStalledConsumerRecreated(t *testing.T) {
	testStalledConsumer(t, "1s", false, 15*time.Second)
}

// TestJetStreamStalledConsumerRecreatedWhileOpening does the same while
// the engine counts as opening (waiting for its index, as a node taking
// over from a failed one does), with a stall timeout that would take
// longer than the wait allowed: the shorter limit of opening applies.
func TestJetStreamStalledConsumerRecreatedWhileOpening(t *testing.T) {
	stall := 4 * minLoadStall
	testStalledConsumer(t, stall.String(), true, stall-minLoadStall/2)
}

func testStalledConsumer(t *testing.T, stall string, opening bool, within time.Duration) {
	ctx := t.Context()
	a := openEngine(t, map[string]string{"commit": "batch", "stall_timeout": stall})
	b := openEngine(t, map[string]string{"url": a.srv.ClientURL()})

	if _, err := engine.Commit(ctx, b, new(engine.Batch).Put([]byte("k"), []byte("v1"))); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	waitFor(t, 10*time.Second, "the first commit in the index", func() bool {
		v, err := engine.Get(ctx, a, []byte("k"))
		return err == nil && string(v) == "v1"
	})

	gen := a.view.nextGen() // the running consumer's messages stop applying
	applied, _ := a.view.state()
	a.feed.loading.Store(opening)
	began := time.Now()
	for i := range 20 {
		if _, err := engine.Commit(ctx, b, new(engine.Batch).Put([]byte("k"), []byte{'w', byte('a' + i)}).Append([]byte("e"))); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	// Nothing applies while the orphaned consumer is current...
	time.Sleep(300 * time.Millisecond)
	if now, _ := a.view.state(); now != applied {
		t.Fatalf("index moved from %d to %d with its consumer orphaned: the test does not stall it", applied, now)
	}
	// ...until the watchdog replaces it, well within a few stall periods.
	waitFor(t, within, "the watchdog to recreate the consumer", func() bool {
		a.view.mu.Lock()
		defer a.view.mu.Unlock()
		return a.view.gen > gen
	})
	t.Logf("recreated after %v", time.Since(began).Round(10*time.Millisecond))
	waitFor(t, 10*time.Second, "the last commit in the index", func() bool {
		v, err := engine.Get(ctx, a, []byte("k"))
		return err == nil && string(v) == "wt"
	})
	got := scanValues(t, a, 0)
	if len(got) != 1 {
		t.Fatalf("log entries after the recreation = %v, want the one value e", got)
	}
}

// TestJetStreamLeaderLast: the stream leader's newest message, asked
// through the stream API, is the last sequence the index applied after a
// commit, and an empty stream has none. Opening relies on it to tell a
// consumer that found nothing more from an index that has everything.
func TestJetStreamLeaderLast(t *testing.T) {
	ctx := t.Context()
	a := openEngine(t, map[string]string{"commit": "batch"})
	if seq, found, err := a.feed.leaderLast(ctx); err != nil || found {
		t.Fatalf("leaderLast of an empty stream = %d, %v, %v; want none", seq, found, err)
	}
	for i := range 3 {
		if _, err := engine.Commit(ctx, a, new(engine.Batch).Put([]byte{'k', byte('0' + i)}, []byte("v")).Append([]byte("e"))); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	applied, _ := a.view.state()
	seq, found, err := a.feed.leaderLast(ctx)
	if err != nil || !found || seq != applied || seq == 0 {
		t.Fatalf("leaderLast after three commits = %d, %v, %v; want the applied sequence %d", seq, found, err, applied)
	}
}
