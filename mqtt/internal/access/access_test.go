package access

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
)

// gated authenticates once released, and names the user it was given.
type gated struct{ release chan struct{} }

func (g gated) Authenticate(ctx context.Context, info auth.ConnInfo) (auth.Identity, error) {
	select {
	case <-g.release:
		return auth.Identity{Username: info.Username}, nil
	case <-ctx.Done():
		return auth.Identity{}, ctx.Err()
	}
}

// prefixRule allows topics under its user's name, and client ids that
// start with it.
type prefixRule struct{}

func (prefixRule) Allow(_ context.Context, id auth.Identity, _ auth.Access, name string) bool {
	return id.Username != "" && len(name) > len(id.Username) && name[:len(id.Username)+1] == id.Username+"/"
}

func (prefixRule) AllowClientID(_ context.Context, id auth.Identity) bool {
	return len(id.ClientID) >= len(id.Username) && id.ClientID[:len(id.Username)] == id.Username
}

// TestIdentifyBoundsConcurrency: with one slot, a second authentication
// waits for the first, and gives up with its context.
func TestIdentifyBoundsConcurrency(t *testing.T) {
	g := New(gated{make(chan struct{})}, nil, 1, &counters.Counters{})
	release := g.authn.(gated).release
	first := make(chan error, 1)
	go func() {
		_, err := g.Identify(context.Background(), auth.ConnInfo{Username: "a"})
		first <- err
	}()
	for len(g.sem) == 0 {
		time.Sleep(time.Millisecond) // until the first holds the slot
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Identify(ctx, auth.ConnInfo{Username: "b"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second authentication with the slot taken: %v, want the context's deadline", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	id, err := g.Identify(context.Background(), auth.ConnInfo{Username: "c"})
	if err != nil || id.Username != "c" {
		t.Fatalf("authentication after the slot freed: %+v, %v", id, err)
	}
}

// TestAllowCountsRefusals: what the Authorizer refuses is counted by
// access; without an Authorizer or Authenticator everything passes.
func TestAllowCountsRefusals(t *testing.T) {
	var c counters.Counters
	g := New(nil, prefixRule{}, 0, &c)
	ctx := context.Background()
	alice := auth.Identity{Username: "alice", ClientID: "alice-1"}
	if !g.Allow(ctx, alice, auth.AccessWrite, "alice/x") || g.Allow(ctx, alice, auth.AccessWrite, "bob/x") {
		t.Fatal("write checks not as the rule says")
	}
	if g.MayRead(ctx, "alice-1", "alice", "bob/x") || g.Allow(ctx, alice, auth.AccessSubscribe, "#") {
		t.Fatal("read or subscribe allowed outside the user's prefix")
	}
	if r, w, s := c.Denied[0].Load(), c.Denied[1].Load(), c.Denied[2].Load(); r != 1 || w != 1 || s != 1 {
		t.Fatalf("denied read/write/subscribe = %d/%d/%d, want 1/1/1", r, w, s)
	}
	if !g.AllowClientID(ctx, alice) || g.AllowClientID(ctx, auth.Identity{Username: "alice", ClientID: "bob-1"}) {
		t.Fatal("client ids not bound as the rule says")
	}
	open := New(nil, nil, 0, &c)
	id, err := open.Identify(ctx, auth.ConnInfo{Username: "anyone"})
	if err != nil || id.Username != "anyone" || !open.Allow(ctx, id, auth.AccessWrite, "x") || !open.AllowClientID(ctx, id) {
		t.Fatalf("a guard without checks refused: %+v, %v", id, err)
	}
}
