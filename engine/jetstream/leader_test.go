//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/engine/jetstream/jetstreamtest"
)

// Three streams, each opened with another server as its leader, lead on
// three servers, and lead where asked again when opened with the servers
// rotated; a leader that
// is not a server of the stream, or a leader without a replicated stream,
// is refused with the servers it could be.
func TestStreamsLeadWhereAsked(t *testing.T) {
	servers := startCluster(t)
	url := clientURLs(servers)
	streams := []string{"part0", "part1", "part2"}
	// Round 1 moves every leader that round 0 placed.
	for round := range 2 {
		for i, name := range streams {
			want := servers[(i+round)%3].Name()
			e := openEngine(t, map[string]string{"url": url, "replicas": "3", "stream": name, "leader": want})
			info, err := e.st.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Cluster.Leader; got != want {
				t.Fatalf("round %d: stream %s leads on %s, asked %s", round, name, got, want)
			}
			if _, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte("k"), []byte("v")).Append([]byte("x"))); err != nil {
				t.Fatalf("commit on %s: %v", name, err)
			}
			_ = e.Close()
		}
	}
	// Through the registry, as serve opens it: the parameter is declared.
	_, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{"url": url, "replicas": "3", "stream": "part0", "leader": "nobody"}})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), servers[0].Name()) {
		t.Fatalf("leader=nobody: %v, want ErrInvalidOption naming the stream's servers", err)
	}
	_, err = engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{"leader": "n1"}})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "replicas=2 or more") {
		t.Fatalf("leader without url: %v", err)
	}
}

// An election that moves the leader away from the server asked for is
// undone at the next check.
func TestLeaderMovedBack(t *testing.T) {
	servers := startCluster(t)
	e := openEngine(t, map[string]string{"url": clientURLs(servers), "replicas": "3", "stream": "kept",
		"leader": servers[0].Name(), "leader_check": "200ms"})
	leader := func() string {
		// A request sent while the leader changes may go unanswered.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		info, err := e.st.Info(ctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		return info.Cluster.Leader
	}
	if got := leader(); got != servers[0].Name() {
		t.Fatalf("opened with leader %s, leads on %s", servers[0].Name(), got)
	}
	// Move it away as an election would, without the engine's help.
	body := []byte(`{"placement":{"preferred":"` + servers[1].Name() + `"}}`)
	waitFor(t, 15*time.Second, "the leader moved away", func() bool {
		if leader() == servers[1].Name() {
			return true
		}
		_, _ = e.nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.kept", body, time.Second)
		return false
	})
	waitFor(t, 15*time.Second, "the leader moved back", func() bool { return leader() == servers[0].Name() })
	if _, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte("k"), []byte("v")).Append([]byte("x"))); err != nil {
		t.Fatalf("commit after the moves: %v", err)
	}
	_, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{"url": clientURLs(servers), "replicas": "3",
		"leader": servers[0].Name(), "leader_check": "1ms"}})
	if !errors.Is(err, engine.ErrInvalidOption) || !strings.Contains(err.Error(), "leader_check") {
		t.Fatalf("leader_check=1ms: %v", err)
	}
}

// A node opened with leader= a server that is down starts anyway, the
// stream led elsewhere, and moves the leader there once the server is
// back and current: a stopped server must not keep a node from serving.
func TestLeaderAskedWhileDown(t *testing.T) {
	c := jetstreamtest.StartCluster(t, 3)
	jetstreamtest.WaitMetaLeader(t, c.Servers)
	params := map[string]string{"url": c.URLs(), "replicas": "3", "stream": "down", "leader_check": "200ms"}
	first := openEngine(t, params)
	_ = first.Close() // the stream exists, with a replica on every server
	c.Stop(0)
	params["url"], params["leader"] = c.URLs(), c.Servers[0].Name()
	start := time.Now()
	e := openEngine(t, params)
	if took := time.Since(start); took > leaderMoveTimeout {
		t.Fatalf("open took %v with the server asked for down", took)
	}
	if _, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte("k"), []byte("v")).Append([]byte("x"))); err != nil {
		t.Fatalf("commit with the server asked for down: %v", err)
	}
	c.Restart(0)
	waitFor(t, 30*time.Second, "the leader moved to the restarted server", func() bool {
		return c.StreamLeader("down") == 0
	})
	if _, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte("k"), []byte("v2")).Append([]byte("x"))); err != nil {
		t.Fatalf("commit after the move: %v", err)
	}
}
