//go:build !linux && !nopebble

package pebble

import "github.com/cockroachdb/pebble/v2/vfs"

// preallocateWAL reserves space for a write-ahead log as Pebble does
// elsewhere (see prealloc_linux.go for why Linux differs).
func preallocateWAL(f vfs.File, off, n int64) error { return f.Preallocate(off, n) }

// preallocUnsupported reports false: what Pebble's own Preallocate
// returns is reported as it is.
func preallocUnsupported(error) bool { return false }
