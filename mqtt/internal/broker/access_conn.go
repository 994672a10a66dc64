package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/access"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// tlsStater is a connection that carries a TLS session: *tls.Conn, and
// the WebSocket connections of a secure listener.
type tlsStater interface {
	ConnectionState() tls.ConnectionState
}

// authenticate runs the Authenticator and the client id and will checks
// of a CONNECT; false means the client is refused with the returned code.
// A refusal is answered only after Options.AuthFailureDelay from the
// start of the attempt: a client guessing passwords waits, the broker's
// CPU does not.
func (c *conn) authenticate(cp *packet.Connect, assigned bool) (packet.ReasonCode, bool) {
	start := time.Now()
	id, err := c.b.guard.Identify(c.ctx, c.connInfo(cp, assigned))
	if err == nil {
		id.ClientID = c.client
		if !assigned && !c.b.guard.AllowClientID(c.ctx, id) {
			err = fmt.Errorf("client id %q: %w", c.client, auth.ErrNotAuthorized)
		}
	}
	if err == nil && cp.Will != nil && !c.b.guard.Allow(c.ctx, id, auth.AccessWrite, cp.Will.Topic) {
		err = fmt.Errorf("will topic %q: %w", cp.Will.Topic, auth.ErrNotAuthorized)
	}
	if err == nil {
		c.id = id
		return packet.Success, true
	}
	reason, rc := counters.AuthError, packet.ServerUnavailable
	switch {
	case errors.Is(err, auth.ErrBadCredentials):
		reason, rc = counters.AuthBadCredentials, packet.BadUserNameOrPassword
	case errors.Is(err, auth.ErrNotAuthorized):
		reason, rc = counters.AuthNotAuthorized, packet.NotAuthorized
	case errors.Is(err, access.ErrBusy):
		reason, rc = counters.AuthBusy, packet.ServerBusy
	}
	c.b.metrics.AuthRefused[reason].Add(1)
	c.log.Warn("connection refused", "user", cp.Username, "reason", counters.AuthReasonNames[reason], "err", err)
	if d := c.b.opts.AuthFailureDelay; d > 0 {
		t := time.NewTimer(time.Until(start.Add(d)))
		select {
		case <-t.C:
		case <-c.ctx.Done():
		}
		t.Stop()
	}
	return rc, false
}

// connInfo is what the client of c presents in cp, for the Authenticator.
func (c *conn) connInfo(cp *packet.Connect, assigned bool) auth.ConnInfo {
	info := auth.ConnInfo{
		HasUsername: cp.HasUsername, Username: cp.Username,
		HasPassword: cp.HasPassword, Password: cp.Password,
		ProtocolVersion: byte(cp.Version), Remote: c.nc.RemoteAddr(),
	}
	if !assigned {
		info.ClientID = c.client
	}
	if ts, ok := c.nc.(tlsStater); ok {
		if st := ts.ConnectionState(); st.HandshakeComplete {
			info.TLS = &st
		}
	}
	return info
}

// mayPublish reports whether the connection may publish on name.
func (c *conn) mayPublish(name string) bool {
	if c.b.guard.Allow(c.ctx, c.id, auth.AccessWrite, name) {
		return true
	}
	c.log.Debug("publish refused", "user", c.id.Username, "topic", name)
	return false
}

// maySubscribe reports whether the connection may subscribe to filter
// (for a shared subscription, the filter after $share/{group}/).
func (c *conn) maySubscribe(filter string) bool {
	if c.b.guard.Allow(c.ctx, c.id, auth.AccessSubscribe, filter) {
		return true
	}
	c.log.Info("subscription refused", "user", c.id.Username, "filter", filter)
	return false
}

// refusePublish answers a PUBLISH the connection may not make: a 5.0
// client gets "not authorized" in its PUBACK or PUBREC; a 3.1.1 client,
// which has no way to be told, gets its acknowledgement and the message
// is dropped, as [MQTT-3.3.5-2] allows, which keeps its session. QoS 0
// is dropped.
func (c *conn) refusePublish(p *packet.Publish) bool {
	var rc packet.ReasonCode
	if c.version == packet.V5 {
		rc = packet.NotAuthorized
	}
	switch p.QoS {
	case packet.QoS1:
		return c.ack(ackEntry{pkt: &packet.Puback{PacketID: p.PacketID, ReasonCode: rc}, pi: p.PacketID})
	case packet.QoS2:
		// No exchange is kept: a 3.1.1 client's PUBREL finds nothing
		// staged and gets its PUBCOMP; a 5.0 client sends none after a
		// failure code (5.0 section 4.3.3).
		if ex := c.exchanges[p.PacketID]; ex != nil && !ex.released {
			return c.ack(ackEntry{pkt: &packet.Pubrec{PacketID: p.PacketID}, pi: p.PacketID})
		}
		return c.ack(ackEntry{pkt: &packet.Pubrec{PacketID: p.PacketID, ReasonCode: rc}, pi: p.PacketID})
	}
	return true
}

// capKeepAlive applies Options.MaxKeepAlive to the client's keep alive.
// tell reports that a 5.0 client must be told the value in its CONNACK;
// false ok refuses a 3.1.1 client over the cap, which cannot be told.
func (c *conn) capKeepAlive() (tell, ok bool) {
	m := c.b.opts.MaxKeepAlive.Truncate(time.Second)
	if m <= 0 || (c.keepAlive > 0 && c.keepAlive <= m) {
		return false, true
	}
	if c.version != packet.V5 {
		c.log.Info("connection refused: keep alive over --max-keep-alive", "keep_alive", c.keepAlive, "max", m)
		return false, false
	}
	c.keepAlive = min(m, 65535*time.Second)
	return true, true
}
