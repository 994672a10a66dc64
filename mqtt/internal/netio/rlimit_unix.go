//go:build unix

package netio

import "syscall"

// OpenFileLimit is the soft RLIMIT_NOFILE (which the Go runtime raises to
// the hard limit at start), or 0 when unknown.
func OpenFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
