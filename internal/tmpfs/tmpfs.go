// Package tmpfs mounts small file systems for the tests that fill a disk:
// a tmpfs of a few MiB runs out of space as a real disk does (ENOSPC from
// write, SIGBUS from a write through a memory map), in seconds.
package tmpfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
	t.Cleanup(func() { unmount(t, mnt) })
	return mnt
}

// unmount unmounts mnt, waiting a while for files still open under it: a
// server stopped by the test may close its last files from goroutines
// that outlive its Shutdown by moments. A file system still busy after
// that is detached lazily (it goes when its last file closes), and the
// files this process holds open under it are logged: the test's own
// assertions are done by now, and a descriptor a library leaks after a
// failed write is worth seeing but not a failure of the test.
func unmount(t testing.TB, mnt string) {
	var out []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	held := openUnder(mnt)
	if lout, lerr := exec.Command("umount", "-l", mnt).CombinedOutput(); lerr != nil {
		t.Errorf("umount %s: %v: %s; lazily: %v: %s", mnt, err, out, lerr, lout)
		return
	}
	t.Logf("umount %s: %v: %s; detached lazily; files open under it: %v", mnt, err, bytes.TrimSpace(out), held)
}

// openUnder lists the files this process has open under dir.
func openUnder(dir string) []string {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var held []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			held = append(held, target)
		}
	}
	return held
}

// Fill writes a file of n bytes at name and syncs it, leaving that much
// less space on its file system; removing the file gives it back.
func Fill(t testing.TB, name string, n int) {
	t.Helper()
	if err := os.WriteFile(name, make([]byte, n), 0o644); err != nil {
		t.Fatalf("fill %s: %v", name, err)
	}
}
