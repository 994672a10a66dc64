//go:build !linux && !nopebble

package pebble

import "github.com/cockroachdb/pebble/v2/vfs"

// reservesWAL is false here: Pebble reserves its logs' space as it does
// elsewhere (see prealloc_linux.go for why Linux differs).
const reservesWAL = false

func reserveWAL(vfs.File, int64, int64) error { return nil }

// preallocUnsupported reports false: what Pebble's own Preallocate
// returns is reported as it is.
func preallocUnsupported(error) bool { return false }
