//go:build !linux

package proc

import "syscall"

// procAttr leaves the process attributes at their defaults where the
// kernel has no parent-death signal.
func procAttr() *syscall.SysProcAttr { return nil }
