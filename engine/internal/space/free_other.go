//go:build !unix

package space

import (
	"errors"
	"fmt"
	"os"
)

// Free reports errors.ErrUnsupported where the free space is not
// measured; a guard then admits every write (see Guard.Admit).
func Free(dir string) (int64, error) {
	return 0, fmt.Errorf("free space of %s: %w", dir, errors.ErrUnsupported)
}

// Allocated returns a file's size: where its blocks are not known, a
// sparse file counts as full.
func Allocated(info os.FileInfo) int64 { return info.Size() }
