package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
)

// Authentication and authorization are two small interfaces an application
// that embeds the broker implements (Files is the password and ACL files
// of `tidemark serve`), set in mqtt.Options. The broker asks the Authenticator
// once per CONNECT, on the connection's own goroutine and never more
// than Options.AuthConcurrency at once, and the Authorizer on every
// PUBLISH, SUBSCRIBE, will and retained message; the Authorizer is on the
// hot path and must not block.

// ConnInfo is what a client presents in its CONNECT, with where it came
// from.
type ConnInfo struct {
	// ClientID is the client identifier of the CONNECT; empty when the
	// client asked the broker to assign one.
	ClientID string
	// HasUsername and HasPassword are the CONNECT's flags; Username and
	// Password may be empty when set.
	HasUsername bool
	Username    string
	HasPassword bool
	Password    []byte
	// ProtocolVersion is 4 for MQTT 3.1.1 and 5 for MQTT 5.0.
	ProtocolVersion byte
	// Remote is the client's address.
	Remote net.Addr
	// TLS is the state of the connection's TLS session (also under a
	// secure WebSocket), nil on a plain connection. When the listener
	// verifies client certificates, TLS.VerifiedChains holds the client's
	// verified chain.
	TLS *tls.ConnectionState
}

// Identity is who a connection acts as once authenticated.
type Identity struct {
	// Username is the authenticated user; empty for an anonymous client.
	Username string
	// ClientID is the connection's client identifier (the assigned one
	// when the client sent none); the broker sets it after Authenticate.
	ClientID string
}

// Access is the kind of access an Authorizer grants or refuses.
type Access uint8

const (
	// AccessRead is receiving a message published on a topic (a
	// retained message, or one routed to a subscription).
	AccessRead Access = 1 << iota
	// AccessWrite is publishing on a topic: a PUBLISH, a will, a retained
	// message.
	AccessWrite
	// AccessSubscribe is subscribing to a topic filter; for a shared
	// subscription the filter is the one after $share/{group}/.
	AccessSubscribe
)

// String names the access as the logs and metrics do.
func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessSubscribe:
		return "subscribe"
	}
	return "unknown"
}

// Errors an Authenticator returns to choose the CONNACK code; any other
// error refuses the client with "server unavailable" and is logged.
var (
	// ErrBadCredentials refuses a wrong user name or password: 5.0 0x86,
	// 3.1.1 return code 4.
	ErrBadCredentials = errors.New("mqtt: bad user name or password")
	// ErrNotAuthorized refuses a client that may not connect (an anonymous
	// client where anonymous access is off, a client id bound to another
	// user): 5.0 0x87, 3.1.1 return code 5.
	ErrNotAuthorized = errors.New("mqtt: not authorized")
)

// Authenticator decides who a connecting client is.
type Authenticator interface {
	// Authenticate returns the identity of the client presenting info,
	// or an error wrapping ErrBadCredentials or ErrNotAuthorized to
	// refuse it. ctx ends when the connection does.
	Authenticate(ctx context.Context, info ConnInfo) (Identity, error)
}

// Authorizer decides what an identity may do.
type Authorizer interface {
	// Allow reports whether id has access to name, a topic name for
	// AccessRead and AccessWrite, a topic filter for AccessSubscribe.
	// A subscription it grants should only match topics it would grant
	// AccessRead on: the broker checks the filter once, at SUBSCRIBE.
	Allow(ctx context.Context, id Identity, access Access, name string) bool
}

// ClientIDAuthorizer is an Authorizer that also binds client ids to
// users; the broker asks it at CONNECT when the Authorizer implements it.
type ClientIDAuthorizer interface {
	// AllowClientID reports whether id may use the client id id.ClientID,
	// and so take over the session of that client id.
	AllowClientID(ctx context.Context, id Identity) bool
}
