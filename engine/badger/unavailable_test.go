//go:build nobadger

package badger_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/badger"
)

// TestUnavailable checks a build without the engine says which engine is
// missing and which tag removed it.
func TestUnavailable(t *testing.T) {
	_, err := engine.Open(t.Context(), "badger", engine.Options{Dir: t.TempDir()})
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("open badger in a build without it: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{`"badger"`, "nobadger"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, ok := engine.Unavailable()["badger"]; !ok {
		t.Errorf("engine.Unavailable() does not list badger")
	}
}
