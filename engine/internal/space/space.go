// Package space is what the engines share to live through a full disk:
// the free space of a data directory's file system, a probe that tells
// whether the directory takes writes again, and a guard that refuses
// writes while less than a reserve is free.
//
// Pebble and LMDB see a full disk as an error from a write and recover
// from it; they use the probe alone. Badger writes through memory-mapped
// files (a full disk is a SIGBUS that ends the process) and nats-server
// disables a stream's store for good after one failed write, so those
// engines must never let their library meet a full disk: they ask the
// guard before each write instead.
package space

import (
	"errors"
	"io"
	"os"
	"path/filepath"
)

// ProbeName is the file a probe writes in the directory it tests.
const ProbeName = "tidemark.space-probe"

// File is what a probe writes through: an os.File, or a file of the
// engine's own file-system layer (Pebble's vfs.File).
type File interface {
	io.Writer
	Sync() error
	Close() error
}

// ProbeWith writes n bytes to a new file name through create, syncs it,
// closes and removes it. It returns the first error, nil only when the
// bytes reached the disk: the directory takes that much again.
func ProbeWith(create func(name string) (File, error), remove func(name string) error, name string, n int) (err error) {
	f, err := create(name)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if rerr := remove(name); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = rerr
		}
	}()
	buf := make([]byte, 64<<10)
	for done := 0; done < n; done += len(buf) {
		if _, err := f.Write(buf[:min(len(buf), n-done)]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// Probe writes, syncs and removes a file of n bytes in dir (ProbeName).
func Probe(dir string, n int) error {
	create := func(name string) (File, error) { return os.Create(name) }
	return ProbeWith(create, os.Remove, filepath.Join(dir, ProbeName), n)
}
