//go:build nopebble

package pebble_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
)

// TestUnavailable checks a build without the engine says which engine is
// missing and which tag removed it.
func TestUnavailable(t *testing.T) {
	_, err := engine.Open(t.Context(), "pebble", engine.Options{Dir: t.TempDir()})
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("open pebble in a build without it: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{`"pebble"`, "nopebble"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, ok := engine.Unavailable()["pebble"]; !ok {
		t.Errorf("engine.Unavailable() does not list pebble")
	}
}
