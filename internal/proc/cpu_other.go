//go:build !unix

package proc

import "time"

// SelfCPU returns zero: the system does not say here.
func SelfCPU() time.Duration { return 0 }
