package netio

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// WebSocketPath is the HTTP path of MQTT over WebSocket, as most clients
// (MQTT.js, mosquitto, Paho) expect it.
const WebSocketPath = "/mqtt"

// wsHandshakeTimeout bounds the HTTP request and upgrade of a WebSocket
// connection, like the 10 s the broker gives a CONNECT.
const wsHandshakeTimeout = 10 * time.Second

// ListenWebSocket serves MQTT over WebSocket (MQTT 5.0 section 6) on ln
// at WebSocketPath and returns a net.Listener whose connections carry the
// MQTT byte stream, for the broker (mqtt.Broker.Serve): the broker treats them as it treats
// TCP connections. A client must offer the subprotocol "mqtt" (or the
// older "mqttv3.1"); any origin is accepted, as credentials are checked
// by the broker. When ln is a TLS listener (wss), the connections report
// the TLS session as *tls.Conn does, so client certificates reach the
// Authenticator. Closing the returned listener closes ln.
func ListenWebSocket(ln net.Listener, log *slog.Logger) net.Listener {
	if log == nil {
		log = slog.Default()
	}
	w := &wsListener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{}), log: log}
	w.up = websocket.Upgrader{
		HandshakeTimeout: wsHandshakeTimeout,
		Subprotocols:     []string{"mqtt", "mqttv3.1"},
		CheckOrigin:      func(*http.Request) bool { return true },
	}
	mux := http.NewServeMux()
	mux.HandleFunc(WebSocketPath, w.serveHTTP)
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: wsHandshakeTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		err := w.srv.Serve(ln)
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.fail(err)
		}
	}()
	return w
}

type wsListener struct {
	ln    net.Listener
	srv   *http.Server
	up    websocket.Upgrader
	log   *slog.Logger
	conns chan net.Conn

	once sync.Once
	done chan struct{}
	err  error
}

func (w *wsListener) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		http.Error(rw, "MQTT over WebSocket: connect with a WebSocket client, subprotocol mqtt", http.StatusBadRequest)
		return
	}
	if len(websocket.Subprotocols(r)) == 0 {
		http.Error(rw, "MQTT over WebSocket needs the subprotocol mqtt", http.StatusBadRequest)
		return
	}
	ws, err := w.up.Upgrade(rw, r, nil)
	if err != nil {
		w.log.Debug("websocket upgrade", "remote", r.RemoteAddr, "err", err)
		return // the upgrader has answered
	}
	if ws.Subprotocol() == "" {
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError, "subprotocol mqtt required"), time.Now().Add(time.Second))
		ws.Close()
		return
	}
	c := &wsConn{ws: ws, tls: r.TLS}
	select {
	case w.conns <- c:
	case <-w.done:
		ws.Close()
	}
}

// Accept returns the next MQTT over WebSocket connection.
func (w *wsListener) Accept() (net.Conn, error) {
	select {
	case c := <-w.conns:
		return c, nil
	case <-w.done:
		return nil, w.err
	}
}

func (w *wsListener) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

// Close stops accepting and closes the underlying listener; connections
// already accepted stay open.
func (w *wsListener) Close() error {
	w.fail(net.ErrClosed)
	return w.srv.Close()
}

// Addr is the underlying listener's address.
func (w *wsListener) Addr() net.Addr { return w.ln.Addr() }

// wsConn is a WebSocket connection as a byte stream: reads run across
// message boundaries (a client may split a packet over several binary
// messages, or send several in one), each write is one binary message.
type wsConn struct {
	ws  *websocket.Conn
	tls *tls.ConnectionState
	r   io.Reader // the message being read
}

var errTextFrame = errors.New("mqtt: websocket: MQTT must be carried in binary messages")

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errTextFrame // [MQTT-6.0.0-1]
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *wsConn) Close() error {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(100*time.Millisecond))
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr                { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.ws.RemoteAddr() }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}

// ConnectionState is the TLS session of a secure WebSocket; a zero state
// (HandshakeComplete false) on a plain one.
func (c *wsConn) ConnectionState() tls.ConnectionState {
	if c.tls == nil {
		return tls.ConnectionState{}
	}
	return *c.tls
}
