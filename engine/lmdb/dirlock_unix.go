//go:build cgo && !nolmdb && unix

package lmdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFileName is the file whose exclusive flock marks a directory in use.
// It is not an LMDB file: LMDB's own lock.mdb admits many processes.
const lockFileName = "tidemark.lock"

// dirLock is an exclusive lock on an engine directory.
type dirLock struct{ f *os.File }

// lockDir takes the directory's lock without waiting. flock locks belong to
// the open file, so a second engine in the same process is refused too.
func lockDir(dir string) (*dirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lmdb: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lmdb: %s is in use by another open engine: %w", dir, err)
		}
		return nil, fmt.Errorf("lmdb: lock %s: %w", dir, err)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock; the file stays for the next open.
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}
