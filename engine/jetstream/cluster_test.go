//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/jetstream/jetstreamtest"
)

// openEngine opens a jetstream engine and closes it when the test ends.
func openEngine(t *testing.T, params map[string]string) *db {
	t.Helper()
	e, err := open(t.Context(), engine.Options{Dir: t.TempDir(), Params: params})
	if err != nil {
		t.Fatalf("open jetstream engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e.(*db)
}

func waitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch signal for %s", what)
	}
}

func scanValues(t *testing.T, e engine.Engine, from engine.LogKey) map[string]engine.LogKey {
	t.Helper()
	out := map[string]engine.LogKey{}
	err := e.ScanLog(t.Context(), from, false, func(en engine.Entry) bool {
		out[string(en.Value)] = en.Key
		return true
	})
	if err != nil {
		t.Fatalf("scan log: %v", err)
	}
	return out
}

// TestJetStreamSecondEngineSeen commits through a second, independent
// engine connected to the first one's embedded server and checks that the
// first engine's Watch, ScanLog, reads, checks and truncation floor all
// follow it.
func TestJetStreamSecondEngineSeen(t *testing.T) {
	ctx := t.Context()
	a := openEngine(t, map[string]string{"commit": "batch"})
	b := openEngine(t, map[string]string{"url": a.srv.ClientURL()})

	w := a.Watch(ctx)
	res, err := engine.Commit(ctx, b, new(engine.Batch).Put([]byte("shared"), []byte("from-b")).Append([]byte("entry-b")))
	if err != nil {
		t.Fatalf("commit through the second engine: %v", err)
	}
	waitSignal(t, w, "the second engine's commit")
	got := scanValues(t, a, 0)
	if k, ok := got["entry-b"]; !ok || k != res.Keys[0] {
		t.Fatalf("first engine's scan = %v, want entry-b at %d", got, res.Keys[0])
	}
	if v, err := engine.Get(ctx, a, []byte("shared")); err != nil || string(v) != "from-b" {
		t.Fatalf("first engine reads shared = %q, %v; want from-b", v, err)
	}

	// A check that held on b's index but not on the stream fails there
	// too: the expectation travels as the key's sequence.
	if _, err := engine.Commit(ctx, a, new(engine.Batch).Expect([]byte("shared"), []byte("from-b")).Put([]byte("shared"), []byte("from-a"))); err != nil {
		t.Fatalf("compare-and-set on the first engine: %v", err)
	}
	_, err = engine.Commit(ctx, b, new(engine.Batch).Expect([]byte("shared"), []byte("from-b")).Put([]byte("shared"), []byte("stale")))
	if !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("stale compare-and-set on the second engine: got %v, want ErrConflict", err)
	}
	if v, err := engine.Get(ctx, a, []byte("shared")); err != nil || string(v) != "from-a" {
		t.Fatalf("after the stale write shared = %q, %v; want from-a", v, err)
	}

	// Keys from both engines interleave in one order.
	ra, err := engine.Commit(ctx, a, new(engine.Batch).Append([]byte("entry-a")))
	if err != nil {
		t.Fatalf("commit on the first engine: %v", err)
	}
	if ra.Keys[0] <= res.Keys[0] {
		t.Fatalf("key %d of a later commit not above %d", ra.Keys[0], res.Keys[0])
	}

	// A floor b sets is seen by a.
	if err := b.Truncate(ctx, ra.Keys[0]); err != nil {
		t.Fatalf("truncate on the second engine: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.ScanLog(ctx, 0, false, func(engine.Entry) bool { return true })
		if errors.Is(err, engine.ErrLogTruncated) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first engine never saw the second's truncation floor (scan error %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := scanValues(t, a, ra.Keys[0]); len(got) != 1 || got["entry-a"] != ra.Keys[0] {
		t.Fatalf("scan from the floor = %v, want only entry-a", got)
	}
}

// startCluster starts a three-node JetStream cluster on loopback and waits
// until it has a meta leader.
func startCluster(t *testing.T) []*server.Server {
	t.Helper()
	servers := startServers(t)
	jetstreamtest.WaitMetaLeader(t, servers)
	return servers
}

// startServers starts a three-node JetStream cluster on loopback and
// returns once every server takes connections, before the cluster
// elected its leaders.
func startServers(t *testing.T) []*server.Server {
	t.Helper()
	return jetstreamtest.StartServers(t, 3)
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clientURLs(servers []*server.Server) string {
	return jetstreamtest.ClientURLs(servers)
}

// TestJetStreamClusterLeaderLoss runs an R3 stream on a three-node cluster,
// shuts the stream leader down while commits stream in, and checks from the
// two remaining nodes that every commit whose handle completed is there.
func TestJetStreamClusterLeaderLoss(t *testing.T) {
	servers := startCluster(t)
	params := map[string]string{"url": clientURLs(servers), "replicas": "3", "stream": "r3test"}
	var e *db
	waitFor(t, 20*time.Second, "the R3 stream", func() bool {
		opened, err := open(t.Context(), engine.Options{Dir: t.TempDir(), Params: params})
		if err != nil {
			t.Logf("open on the cluster: %v", err)
			return false
		}
		e = opened.(*db)
		return true
	})
	t.Cleanup(func() { _ = e.Close() })

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	completed := map[string]engine.LogKey{}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%d/%d", w, i)
				res, err := engine.Commit(ctx, e, new(engine.Batch).Put([]byte("k/"+id), []byte(id)).Append([]byte(id)))
				if err != nil {
					// In flight at the failover: its outcome is unknown
					// to the caller, so it is not checked.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				completed[id] = res.Keys[0]
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(completed) }
	waitFor(t, 15*time.Second, "commits before the failover", func() bool { return count() >= 200 })

	info, err := e.st.Info(t.Context())
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream info: %v (cluster %+v)", err, info)
	}
	var rest []*server.Server
	for _, s := range servers {
		if s.Name() == info.Cluster.Leader {
			s.Shutdown()
			s.WaitForShutdown()
			continue
		}
		rest = append(rest, s)
	}
	if len(rest) != 2 {
		t.Fatalf("stream leader %q is not one of the servers", info.Cluster.Leader)
	}
	before := count()
	waitFor(t, 25*time.Second, "commits after the failover", func() bool { return count() >= before+50 })
	cancel()
	wg.Wait()

	// Read from the two remaining nodes only, through a fresh engine.
	var r *db
	waitFor(t, 20*time.Second, "an engine on the remaining nodes", func() bool {
		opened, err := open(t.Context(), engine.Options{Dir: t.TempDir(),
			Params: map[string]string{"url": clientURLs(rest), "replicas": "3", "stream": "r3test"}})
		if err != nil {
			t.Logf("open on the remaining nodes: %v", err)
			return false
		}
		r = opened.(*db)
		return true
	})
	defer r.Close()
	inLog := scanValues(t, r, 0)
	snap, err := r.Snapshot(t.Context())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	for id, key := range completed {
		if got, ok := inLog[id]; !ok || got != key {
			t.Fatalf("completed commit %s (key %d) missing from the log after the leader loss (found key %d, present %v)", id, key, got, ok)
		}
		v, err := snap.Get(t.Context(), []byte("k/"+id))
		if err != nil || string(v) != id {
			t.Fatalf("completed commit %s: value %q, %v after the leader loss", id, v, err)
		}
	}
	t.Logf("%d completed commits survived the loss of stream leader %s (%d entries in the log)", len(completed), info.Cluster.Leader, len(inLog))
}

// TestJetStreamClusterStartTogether opens three engines on one R3 stream
// at the same moment, on a cluster that has just started (no leader
// elected yet, no stream): each open waits for what the cluster has not
// done yet, and all three open and see each other's commits.
func TestJetStreamClusterStartTogether(t *testing.T) {
	servers := startServers(t)
	const nodes = 3
	engines := make([]*db, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			// Each node talks to a different server first.
			url := servers[i].ClientURL() + "," + clientURLs(servers)
			e, err := open(ctx, engine.Options{Dir: t.TempDir(),
				Params: map[string]string{"url": url, "replicas": "3", "stream": "together"}})
			if err != nil {
				errs[i] = err
				return
			}
			engines[i] = e.(*db)
		}()
	}
	wg.Wait()
	for i, e := range engines {
		if e != nil {
			t.Cleanup(func() { _ = e.Close() })
		}
		if errs[i] != nil {
			t.Fatalf("node %d: open: %v", i, errs[i])
		}
	}
	keys := map[string]engine.LogKey{}
	for i, e := range engines {
		id := fmt.Sprintf("from-%d", i)
		res, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte(id), []byte(id)).Append([]byte(id)))
		if err != nil {
			t.Fatalf("node %d: commit: %v", i, err)
		}
		keys[id] = res.Keys[0]
	}
	for i, e := range engines {
		waitFor(t, 20*time.Second, fmt.Sprintf("node %d to see every commit", i), func() bool {
			got := scanValues(t, e, 0)
			for id, k := range keys {
				if got[id] != k {
					return false
				}
			}
			return true
		})
	}
}

// TestJetStreamStartTimeout: with no server to connect to, opening waits
// for one up to start_timeout, then fails naming what it waited for; a
// start_timeout that is not a positive duration is refused.
func TestJetStreamStartTimeout(t *testing.T) {
	_, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(),
		Params: map[string]string{"url": "nats://127.0.0.1:1", "start_timeout": "1s"}})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connect to nats://127.0.0.1:1: no answer in") {
		t.Fatalf("open with no server: %v, want a deadline error naming the connect", err)
	}
	_, err = engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(),
		Params: map[string]string{"url": "nats://127.0.0.1:1", "start_timeout": "soon"}})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "start_timeout") {
		t.Fatalf("start_timeout=soon: %v, want ErrInvalidOption naming it", err)
	}
}
