//go:build unix

package mqtt

import "syscall"

// openFileLimit is the soft RLIMIT_NOFILE (which the Go runtime raises to
// the hard limit at start), or 0 when unknown.
func openFileLimit() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur > 1<<30 {
		return 0
	}
	return int(l.Cur)
}
