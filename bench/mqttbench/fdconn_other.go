//go:build !linux

package mqttbench

import (
	"context"
	"net"
)

// dialBlocking is an ordinary dial where blocking sockets are not
// implemented.
func dialBlocking(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}
