package badger_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/conformance"
	_ "github.com/tidemark-io/tidemark/engine/badger"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Engine: "badger"})
}

func BenchmarkCommits(b *testing.B) {
	conformance.BenchmarkCommits(b, conformance.Target{Engine: "badger"})
}
