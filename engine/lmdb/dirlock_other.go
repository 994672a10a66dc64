//go:build cgo && !nolmdb && !unix

package lmdb

// dirLock is a no-op where flock is missing: one engine per directory is
// then the caller's to ensure.
type dirLock struct{}

func lockDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) release() {}
