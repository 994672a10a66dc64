//go:build linux

package mqttbench

import "syscall"

// childProcAttr puts a broker in a process group of its own, so a
// Ctrl-C at the terminal reaches only the benchmark, which then stops the
// broker itself; and has the kernel kill it should the benchmark die
// without stopping it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
