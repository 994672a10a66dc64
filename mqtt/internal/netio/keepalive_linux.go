package netio

import (
	"net"
	"syscall"
)

// KeepAliveControl is a net.ListenConfig Control function that turns TCP
// keep-alive on for the listening socket, at the system's keep-alive
// times. On Linux every socket accepted from it starts with keep-alive
// on, so the broker spares each connection the system call that turns it
// on for a client using no MQTT keep alive. Use it with
// ListenConfig.KeepAlive set to -1, which leaves accepted sockets as they
// come.
func KeepAliveControl(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1)
	}); err != nil {
		return err
	}
	return serr
}

// ListenerKeepsAlive reports whether ln is a TCP listener whose socket has
// keep-alive on: Linux copies the option to every socket it accepts.
func ListenerKeepsAlive(ln net.Listener) bool {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return false
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return false
	}
	on := 0
	if err := rc.Control(func(fd uintptr) {
		on, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		return false
	}
	return err == nil && on != 0
}
