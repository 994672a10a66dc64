//go:build !linux

package netio

import (
	"net"
	"syscall"
)

// KeepAliveControl is a net.ListenConfig Control function that leaves the
// listening socket as it is here: only on Linux do accepted sockets
// inherit the listener's keep-alive (see keepalive_linux.go), so the
// broker turns keep-alive on for each connection that needs it.
func KeepAliveControl(_, _ string, _ syscall.RawConn) error { return nil }

// ListenerKeepsAlive reports false: whether accepted sockets inherit the
// listener's keep-alive is not relied on here.
func ListenerKeepsAlive(net.Listener) bool { return false }
