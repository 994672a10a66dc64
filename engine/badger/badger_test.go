//go:build !nobadger

package badger_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/bench/benchtest"
	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/conformance/conformancetest"
	_ "github.com/tidemark-io/tidemark/engine/badger"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformancetest.Run(t, conformance.Target{Engine: "badger"})
}

func BenchmarkCommits(b *testing.B) {
	benchtest.Commits(b, "badger")
}

func BenchmarkSlots(b *testing.B) {
	benchtest.Slots(b, "badger")
}

func BenchmarkLogStats(b *testing.B) {
	benchtest.LogStats(b, "badger")
}

func BenchmarkEmptyRange(b *testing.B) {
	benchtest.EmptyRange(b, "badger")
}
