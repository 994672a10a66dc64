package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// A directory is its first engine's: the same engine takes it again, any
// other is refused naming the owner, whether a marker names it or, for a
// store older than markers, its files do; and a second Take of a held
// directory is refused as in use.
func TestDirectoryBelongsToOneEngine(t *testing.T) {
	dir := t.TempDir()
	l, err := Take("pebble", dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Take("pebble", dir); !errors.Is(err, driver.ErrInUse) {
		t.Fatalf("second Take of a held directory: %v, want ErrInUse", err)
	}
	l.Release()
	if b, err := os.ReadFile(filepath.Join(dir, MarkerName)); err != nil || string(b) != "pebble\n" {
		t.Fatalf("marker: %q, %v", b, err)
	}
	if _, err := Take("badger", dir); !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "holds a pebble store") {
		t.Fatalf("another engine: %v, want ErrInvalidOption naming pebble", err)
	}
	l, err = Take("pebble", dir)
	if err != nil {
		t.Fatalf("the owner again: %v", err)
	}
	l.Release()

	// A store from before markers: its files name its engine.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "data.mdb"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Take("pebble", old); !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "holds a lmdb store (it holds data.mdb)") {
		t.Fatalf("an unmarked LMDB store: %v, want ErrInvalidOption naming lmdb", err)
	}
	if _, err := os.Stat(filepath.Join(old, MarkerName)); !os.IsNotExist(err) {
		t.Fatalf("a refused Take left a marker: %v", err)
	}
	l, err = Take("lmdb", old)
	if err != nil {
		t.Fatalf("the unmarked store's engine: %v", err)
	}
	l.Release()
	if b, _ := os.ReadFile(filepath.Join(old, MarkerName)); string(b) != "lmdb\n" {
		t.Fatalf("marker after the owner's Take: %q", b)
	}
}

// Check refuses a directory holding another engine's store, as Take does,
// and claims nothing: an empty or missing directory stays unmarked.
func TestCheckClaimsNothing(t *testing.T) {
	dir := t.TempDir()
	l, err := Take("pebble", dir)
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if err := Check("jetstream", dir); !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "holds a pebble store") {
		t.Fatalf("Check on a Pebble directory: %v, want ErrInvalidOption naming pebble", err)
	}
	if err := Check("pebble", dir); err != nil {
		t.Fatalf("Check by the owner: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "missing")
	if err := Check("jetstream", empty); err != nil {
		t.Fatalf("Check on a missing directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, MarkerName)); !os.IsNotExist(err) {
		t.Fatalf("Check left a marker: %v", err)
	}
}
