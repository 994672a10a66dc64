//go:build linux

package proc

import "syscall"

// procAttr puts a child in a process group of its own, so a Ctrl-C at the
// terminal reaches only its parent, which then ends the child itself; and
// has the kernel kill it should the parent die without ending it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
