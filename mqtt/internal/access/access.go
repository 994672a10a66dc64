// Package access enforces a broker's access control: it runs the
// application's Authenticator within a bound on concurrent
// authentications, and asks its Authorizer, counting what it refuses.
// The interfaces and the file-based implementation are package mqtt/auth.
package access

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
)

// ErrBusy refuses a CONNECT that found no authentication slot within
// Wait: the broker is busy.
var ErrBusy = errors.New("mqtt: too many authentications in progress")

// Wait bounds how long a CONNECT waits for an authentication slot.
const Wait = 5 * time.Second

// Guard is a broker's access control. Its methods are safe for
// concurrent use.
type Guard struct {
	authn    auth.Authenticator
	authz    auth.Authorizer
	counters *counters.Counters
	// sem bounds the authentications running at once: a password hash
	// costs tens of milliseconds of CPU by design, and a flood of
	// CONNECTs must not take that CPU from the sessions already
	// connected.
	sem chan struct{}
}

// New returns a guard over authn and authz (either may be nil: without
// an Authenticator a client is who it says it is, without an Authorizer
// everything is allowed), running at most concurrency authentications at
// once (0: half the CPUs, at least one) and counting refusals in c.
func New(authn auth.Authenticator, authz auth.Authorizer, concurrency int, c *counters.Counters) *Guard {
	if concurrency <= 0 {
		concurrency = max(runtime.GOMAXPROCS(0)/2, 1)
	}
	return &Guard{authn: authn, authz: authz, counters: c, sem: make(chan struct{}, concurrency)}
}

// Identify runs the Authenticator on info within the concurrency bound,
// waiting at most Wait for a slot (ErrBusy after it).
func (g *Guard) Identify(ctx context.Context, info auth.ConnInfo) (auth.Identity, error) {
	if g.authn == nil {
		return auth.Identity{Username: info.Username}, nil
	}
	t := time.NewTimer(Wait)
	defer t.Stop()
	select {
	case g.sem <- struct{}{}:
	case <-t.C:
		return auth.Identity{}, ErrBusy
	case <-ctx.Done():
		return auth.Identity{}, ctx.Err()
	}
	defer func() { <-g.sem }()
	return g.authn.Authenticate(ctx, info)
}

// AllowClientID reports whether id may use its client id, when the
// Authorizer binds client ids to users (auth.ClientIDAuthorizer).
func (g *Guard) AllowClientID(ctx context.Context, id auth.Identity) bool {
	ca, ok := g.authz.(auth.ClientIDAuthorizer)
	return !ok || ca.AllowClientID(ctx, id)
}

// Allow asks the Authorizer whether id has access a to name, counting a
// refusal.
func (g *Guard) Allow(ctx context.Context, id auth.Identity, a auth.Access, name string) bool {
	if g.authz == nil || g.authz.Allow(ctx, id, a, name) {
		return true
	}
	switch a {
	case auth.AccessRead:
		g.counters.Denied[0].Add(1)
	case auth.AccessWrite:
		g.counters.Denied[1].Add(1)
	default:
		g.counters.Denied[2].Add(1)
	}
	return false
}

// MayRead reports whether the connection of client, authenticated as
// user (empty: anonymous), may receive a message published on topic. The
// delivery path asks per message: a subscription was checked when it was
// made, but the rules may have been reloaded since, and a persistent
// session's subscriptions were checked under the rules of their day.
func (g *Guard) MayRead(ctx context.Context, client, user, topic string) bool {
	if g.authz == nil {
		return true
	}
	return g.Allow(ctx, auth.Identity{Username: user, ClientID: client}, auth.AccessRead, topic)
}
