package mqtt

import (
	"log/slog"
	"net"
	"syscall"

	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
)

// WebSocketPath is the HTTP path of MQTT over WebSocket, as most clients
// (MQTT.js, mosquitto, Paho) expect it.
const WebSocketPath = netio.WebSocketPath

// ListenWebSocket serves MQTT over WebSocket (MQTT 5.0 section 6) on ln
// at WebSocketPath and returns a net.Listener whose connections carry the
// MQTT byte stream, for Broker.Serve: the broker treats them as it treats
// TCP connections. A client must offer the subprotocol "mqtt" (or the
// older "mqttv3.1"); any origin is accepted, as credentials are checked
// by the broker. When ln is a TLS listener (wss), the connections report
// the TLS session as *tls.Conn does, so client certificates reach the
// Authenticator. Closing the returned listener closes ln.
func ListenWebSocket(ln net.Listener, log *slog.Logger) net.Listener {
	return netio.ListenWebSocket(ln, log)
}

// KeepAliveControl is a net.ListenConfig Control function that turns TCP
// keep-alive on for the listening socket, at the system's keep-alive
// times. On Linux every socket accepted from it starts with keep-alive
// on, so the broker spares each connection the system call that turns it
// on for a client using no MQTT keep alive; elsewhere it leaves the
// socket as it is. Use it with ListenConfig.KeepAlive set to -1, which
// leaves accepted sockets as they come.
func KeepAliveControl(network, address string, rc syscall.RawConn) error {
	return netio.KeepAliveControl(network, address, rc)
}
