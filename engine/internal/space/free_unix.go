//go:build unix

package space

import (
	"fmt"
	"os"
	"syscall"
)

// Free returns the bytes an unprivileged writer can still allocate on
// dir's file system.
func Free(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:gosec,unconvert // block counts fit int64; Bsize is uint32 on some systems
}

// Allocated returns the disk space a file takes: for a sparse file less
// than its size.
func Allocated(info os.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512 //nolint:unconvert // Blocks is not int64 everywhere
	}
	return info.Size()
}
