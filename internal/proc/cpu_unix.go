//go:build unix

package proc

import (
	"syscall"
	"time"
)

// SelfCPU returns the CPU time (user and system) this process has used,
// or zero where the system does not say.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
