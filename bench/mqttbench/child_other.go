//go:build !linux

package mqttbench

import "syscall"

// childProcAttr leaves the process attributes at their defaults where
// the kernel has no parent-death signal.
func childProcAttr() *syscall.SysProcAttr { return nil }
