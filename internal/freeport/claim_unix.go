//go:build unix

package freeport

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// held keeps the claim files of this process's ports open: a claim lasts
// as long as its descriptor, so until the process ends.
var held []*os.File

// claim claims port p for this process against the other processes that
// use this package: a broker a test stops and starts again on its port
// must find it free, and another test process's check that the port is
// free would otherwise see it so in between and hand it out. False means
// another process holds it. Where the claim files cannot be made, every
// port counts as claimed (as before claims existed). mu is held.
func claim(p int) bool {
	dir := filepath.Join(os.TempDir(), "tidemark-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return !errors.Is(err, syscall.EWOULDBLOCK)
	}
	held = append(held, f)
	return true
}
