//go:build !cgo || nolmdb

package lmdb_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
)

// TestUnavailable checks a build without the engine says which engine is
// missing, why, and how to get it.
func TestUnavailable(t *testing.T) {
	_, err := engine.Open(t.Context(), "lmdb", engine.Options{Dir: t.TempDir()})
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("open lmdb in a build without it: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{`"lmdb"`, "cgo", "CGO_ENABLED=1", "nolmdb"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if _, ok := engine.Unavailable()["lmdb"]; !ok {
		t.Errorf("engine.Unavailable() does not list lmdb")
	}
}
