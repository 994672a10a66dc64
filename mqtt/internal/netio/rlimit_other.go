//go:build !unix

package netio

// OpenFileLimit is 0 (unknown) where there is no RLIMIT_NOFILE.
func OpenFileLimit() int { return 0 }
