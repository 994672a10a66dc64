//go:build !unix

package freeport

// claim claims nothing on this platform: ports are coordinated within a
// process only.
func claim(int) bool { return true }
