//go:build !nojetstream

package jetstream_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/conformance"
	"github.com/tidemark-io/tidemark/conformance/conformancetest"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
)

func TestMain(m *testing.M) {
	conformance.MaybeRunChild()
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	conformancetest.Run(t, conformance.Target{Engine: "jetstream"})
}

// TestConformanceShared runs the whole suite again with commit=batch, the
// protocol for a stream many Tidemark nodes share: there the second broker
// node of the cross-node cases is an engine of its own on the first one's
// stream, as on a NATS cluster.
func TestConformanceShared(t *testing.T) {
	conformancetest.Run(t, conformance.Target{Engine: "jetstream", Params: map[string]string{"commit": "batch"}})
}
