//go:build !nojetstream

package jetstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
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
