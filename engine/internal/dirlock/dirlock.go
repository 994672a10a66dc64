// Package dirlock gives an engine exclusive use of its data directory: a
// second engine on the same directory, in this process or another, is
// refused with an error wrapping driver.ErrInUse, whatever the backend's
// own locking does (LMDB's admits many processes; an embedded nats-server
// has none). A directory also belongs to one engine for good: the first
// to take it names itself in MarkerName, and another engine is refused
// with an error wrapping driver.ErrInvalidOption, rather than starting
// an empty store of its own beside the one there.
package dirlock

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gofrs/flock"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// FileName is the lock file an engine keeps in its directory.
const FileName = "tidemark.lock"

// Lock is a held directory lock.
type Lock struct{ f *flock.Flock }

// Take locks dir (creating it if needed) without waiting. The operating
// system drops the lock when the process dies, so a crash never leaves a
// directory locked.
func Take(engineName, dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: data directory: %w", engineName, err)
	}
	f := flock.New(filepath.Join(dir, FileName))
	ok, err := f.TryLock()
	if err != nil {
		return nil, fmt.Errorf("%s: lock data directory %s: %w", engineName, dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w: %s is open in another engine (another Tidemark process?); stop it or use another data directory", engineName, driver.ErrInUse, dir)
	}
	if err := claim(engineName, dir); err != nil {
		_ = f.Unlock()
		return nil, err
	}
	return &Lock{f: f}, nil
}

// MarkerName is the file naming the engine whose store a data directory
// holds.
const MarkerName = "tidemark.engine"

// signatures are files only one engine's store has, by which claim knows
// a store written before directories carried a marker.
var signatures = map[string][]string{
	"badger":    {"KEYREGISTRY"},
	"jetstream": {"nats"},
	"lmdb":      {"data.mdb"},
	"pebble":    {"OPTIONS-*", "marker.format-version.*"},
}

// Check reports, as Take would, a dir that holds another engine's store,
// without locking or claiming it: for an engine that keeps nothing of
// its own in dir (JetStream on an external server keeps its index there),
// so that it refuses a directory another engine's data is in.
func Check(engineName, dir string) error {
	owner, why, err := ownerOf(engineName, dir)
	if err != nil || owner == "" || owner == engineName {
		return err
	}
	return foreign(engineName, dir, owner, why)
}

// Owner names the engine whose store dir holds, by its marker or, for a
// store from before markers, by the files only that engine writes; ""
// when dir holds no store (or does not exist).
func Owner(dir string) (string, error) {
	owner, _, err := ownerOf("", dir)
	return owner, err
}

// ownerOf names the engine whose store dir holds and why it says so: the
// engine its marker names, or, without a marker, one other than
// engineName whose files it holds; "" when neither.
func ownerOf(engineName, dir string) (owner, why string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	switch {
	case err == nil:
		return strings.TrimSpace(string(b)), MarkerName + " names it", nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("%s: data directory: %w", cmp.Or(engineName, "engine"), err)
	}
	names := make([]string, 0, len(signatures))
	for name := range signatures {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == engineName {
			continue
		}
		for _, pattern := range signatures[name] {
			if found, _ := filepath.Glob(filepath.Join(dir, pattern)); len(found) > 0 {
				return name, "it holds " + filepath.Base(found[0]), nil
			}
		}
	}
	return "", "", nil
}

// claim makes dir engineName's, or reports whose it is (ownerOf). The
// lock is held, so no other engine claims dir meanwhile.
func claim(engineName, dir string) error {
	owner, why, err := ownerOf(engineName, dir)
	switch {
	case err != nil:
		return err
	case owner == engineName:
		return nil
	case owner != "":
		return foreign(engineName, dir, owner, why)
	}
	marker := filepath.Join(dir, MarkerName)
	// Written whole or not at all: a crash leaves no half-named marker.
	tmp := marker + ".tmp"
	if err := os.WriteFile(tmp, []byte(engineName+"\n"), 0o644); err != nil {
		return fmt.Errorf("%s: data directory: %w", engineName, err)
	}
	if err := os.Rename(tmp, marker); err != nil {
		return fmt.Errorf("%s: data directory: %w", engineName, err)
	}
	return nil
}

func foreign(engineName, dir, owner, why string) error {
	return fmt.Errorf("%s: %w: data directory %s holds a %s store (%s); open it with that engine (tidemark serve --engine %s) or give %s another directory",
		engineName, driver.ErrInvalidOption, dir, owner, why, owner, engineName)
}

// Release unlocks the directory; a nil Lock is a no-op.
func (l *Lock) Release() {
	if l != nil {
		_ = l.f.Unlock()
	}
}
