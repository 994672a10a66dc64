package conformance_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/conformance/conformancetest"
	"github.com/tidemark-io/tidemark/engine"

	// Every engine built into this binary runs the whole suite.
	_ "github.com/tidemark-io/tidemark/engine/badger"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	for _, name := range engine.Drivers() {
		conformancetest.Run(t, conformance.Target{Engine: name})
	}
}

// BenchmarkCommits measures synced commits on every engine in one run,
// beside a raw fdatasync loop on the same disk.
func BenchmarkCommits(b *testing.B) {
	for _, name := range engine.Drivers() {
		benchtest.Commits(b, name)
	}
}
