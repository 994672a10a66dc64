//go:build !nopebble

package pebble_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/conformance/conformancetest"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformancetest.Run(t, conformance.Target{Engine: "pebble"})
}

func BenchmarkCommits(b *testing.B) {
	benchtest.Commits(b, "pebble")
}

func BenchmarkSlots(b *testing.B) {
	benchtest.Slots(b, "pebble")
}

func BenchmarkLogStats(b *testing.B) {
	benchtest.LogStats(b, "pebble")
}

func BenchmarkEmptyRange(b *testing.B) {
	benchtest.EmptyRange(b, "pebble")
}
