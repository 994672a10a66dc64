// Package dirlock gives an engine exclusive use of its data directory: a
// second engine on the same directory, in this process or another, is
// refused with an error wrapping driver.ErrInUse, whatever the backend's
// own locking does (LMDB's admits many processes; an embedded nats-server
// has none).
package dirlock

import (
	"fmt"
	"os"
	"path/filepath"

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
	return &Lock{f: f}, nil
}

// Release unlocks the directory; a nil Lock is a no-op.
func (l *Lock) Release() {
	if l != nil {
		_ = l.f.Unlock()
	}
}
