package jetstream_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/conformance"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Target{Engine: "jetstream"})
}
