//go:build !linux

package mqttbench

import "syscall"

// mosquittoProcAttr leaves the process attributes at their defaults where
// the kernel has no parent-death signal.
func mosquittoProcAttr() *syscall.SysProcAttr { return nil }
