//go:build !nojetstream

package jetstream

import (
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// TestFrontPassesOptionalInterfaces opens the engine as callers do
// (engine.Open, behind the front) and checks that what the broker and the
// conformance suite ask of it through optional interfaces still reaches
// the backend: a shared stream's client URL, the preference for separate
// commits and the atomic batch limit; and that a single-writer stream
// offers no URL to share.
func TestFrontPassesOptionalInterfaces(t *testing.T) {
	for _, mode := range []string{commitBatch, commitWAL} {
		t.Run(mode, func(t *testing.T) {
			e, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{"commit": mode}})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer e.Close()
			sh, ok := e.(engine.Sharer)
			if !ok {
				t.Fatalf("%T does not pass Sharer on", e)
			}
			url := sh.ClientURL()
			if shared := mode == commitBatch; shared != (url != "") {
				t.Fatalf("commit=%s: ClientURL %q, want one only on a shared stream", mode, url)
			}
			if got, want := engine.PrefersSeparateCommits(e), mode == commitBatch; got != want {
				t.Fatalf("commit=%s: PrefersSeparateCommits %v, want %v", mode, got, want)
			}
			want := engine.MaxBatchEntries // embeddedMaxBatch is above it
			if got := engine.MaxCommitEntries(e); got != want {
				t.Fatalf("commit=%s: MaxCommitEntries %d, want %d", mode, got, want)
			}
		})
	}
}
