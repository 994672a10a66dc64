package mqtt_test

// Session takeover between two brokers sharing one store (Options.NodeID).

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// takeoverTable is the broker's table of takeover claims, which the test
// writes to.
const takeoverTable = "mqtt.takeover"

// startNode starts a second broker, with node id node (and the options
// edit makes), on s's store; it returns its address and stops before s
// does.
func startNode(t *testing.T, db *table.DB, node string, edit ...func(*mqtt.Options)) string {
	t.Helper()
	o := mqtt.Options{NodeID: node}
	for _, f := range edit {
		f(&o)
	}
	addr, _ := serveNode(t, db, o)
	return addr
}

// serveNode starts a broker with o on db, listening on a free loopback
// port, and returns its address and the broker, which a test may close
// early; it is closed when the test ends, before the store.
func serveNode(t *testing.T, db *table.DB, o mqtt.Options) (string, *mqtt.Broker) {
	t.Helper()
	b, err := mqtt.New(db, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = b.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = b.Close()
		<-served
	})
	return ln.Addr().String(), b
}

// followClaims queues the takeover claims committed from now on.
func followClaims(t *testing.T, db *table.DB) <-chan []byte {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	head, err := db.Head(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	claims := make(chan []byte, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = db.Follow(ctx, table.SubscribeOptions{Table: takeoverTable, Start: head, IncludeSuperseded: true},
			func(ev table.Event) error {
				claims <- slices.Clone(ev.Value)
				return nil
			})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return claims
}

func nextClaim(t *testing.T, claims <-chan []byte) []byte {
	t.Helper()
	select {
	case v := <-claims:
		return v
	case <-ctxT(t).Done():
		t.Fatal("no takeover claim committed")
		return nil
	}
}

// connToken reads the token of the connection holding client's session.
func connToken(t *testing.T, db *table.DB, client string) string {
	t.Helper()
	si, ok, err := mqtt.SessionOf(ctxT(t), db, client)
	if err != nil || !ok || si.Conn == "" {
		t.Fatalf("session of %s: found %v, %v, connection %q", client, ok, err, si.Conn)
	}
	return si.Conn
}

// TestLateClaimEndsOnlyItsConnection: a node that reads a takeover claim
// late, after the connection it claimed from was taken over and a newer
// connection of the client id is on this node again, leaves the newer one
// alone. The late read is made certain by committing the first claim's
// message again after the second takeover; a claim naming a probe
// connection, committed behind it, tells when the follower has read it.
func TestLateClaimEndsOnlyItsConnection(t *testing.T) {
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID = "A" })
	bAddr := startNode(t, a.DB(), "B")
	claims := followClaims(t, a.DB())

	c1 := connect5(t, a.Addr, "late", false, 300)
	c2 := connect5(t, bAddr, "late", false, 300) // takes it over from A
	if rc := c1.expectDisconnect(); rc != byte(packet.SessionTakenOver) {
		t.Fatalf("the connection on A ended with %#x, want %#x", rc, packet.SessionTakenOver)
	}
	stale := nextClaim(t, claims)
	c3 := connect5(t, a.Addr, "late", false, 300) // takes it back from B
	if rc := c2.expectDisconnect(); rc != byte(packet.SessionTakenOver) {
		t.Fatalf("the connection on B ended with %#x, want %#x", rc, packet.SessionTakenOver)
	}
	nextClaim(t, claims)

	probe := connect5(t, a.Addr, "probe", false, 300)
	tx := a.DB().Begin()
	if err := tx.Message(takeoverTable, "late", stale); err != nil {
		t.Fatal(err)
	}
	if err := tx.Message(takeoverTable, "probe", []byte("elsewhere "+connToken(t, a.DB(), "probe"))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if rc := probe.expectDisconnect(); rc != byte(packet.SessionTakenOver) {
		t.Fatalf("the probe ended with %#x, want %#x", rc, packet.SessionTakenOver)
	}
	select {
	case d := <-c3.discs:
		t.Fatalf("the late claim of %q ended the newer connection on A: DISCONNECT %v", stale, d.ReasonCode)
	default:
	}
	c3.sub("late/x", 1)
	c3.pub("late/x", 1, false, "still here")
	c3.expectOne("late/x", "still here")
}
