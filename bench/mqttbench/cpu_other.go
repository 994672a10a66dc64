//go:build !unix

package mqttbench

import "time"

// processCPU returns zero: the system does not say here.
func processCPU() time.Duration { return 0 }
