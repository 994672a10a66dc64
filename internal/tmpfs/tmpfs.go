// Package tmpfs mounts small file systems for the tests that fill a disk:
// a tmpfs of a few MiB runs out of space as a real disk does (ENOSPC from
// write, SIGBUS from a write through a memory map), in seconds.
package tmpfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Mount mounts a tmpfs of sizeMB MiB in a new directory under the test's
// temporary directory and returns its path; the test's cleanup unmounts
// it. Mounting needs the privilege to mount: without it the test is
// skipped, saying so.
func Mount(t testing.TB, sizeMB int) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.Itoa(sizeMB)+"m", "tmpfs", mnt).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs the privilege to mount): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	return mnt
}

// Fill writes a file of n bytes at name and syncs it, leaving that much
// less space on its file system; removing the file gives it back.
func Fill(t testing.TB, name string, n int) {
	t.Helper()
	if err := os.WriteFile(name, make([]byte, n), 0o644); err != nil {
		t.Fatalf("fill %s: %v", name, err)
	}
}
