package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/tidemark-io/tidemark/engine/jetstream/jetstreamtest"
	"github.com/tidemark-io/tidemark/internal/proc"
)

// TestServeCluster follows docs/cluster.md on a three-server NATS cluster
// on loopback: two `tidemark serve` nodes started at the same moment on
// the fresh cluster, each with a node id it generated and keeps in its
// data directory; a message published on one reaches a persistent
// subscriber on the other; a third node is added and the subscriber's
// session moves to it; the first node is removed with SIGTERM while the
// others keep serving; restarted on its data directory it is the same
// node again.
func TestServeCluster(t *testing.T) {
	bin := tidemarkBinary(t)
	urls := jetstreamtest.ClientURLs(jetstreamtest.StartServers(t, 3))
	base := t.TempDir()
	node := func(name string) []string {
		return []string{"--engine", "jetstream", "--nats-url", urls, "--replicas", "3",
			"--data", filepath.Join(base, name), "--mqtt", freeAddr(t)}
	}

	if out, err := exec.Command(bin, append(append([]string{"serve"}, node("bad")...), "--node-id", "no spaces")...).CombinedOutput(); err == nil || !strings.Contains(string(out), `--node-id "no spaces": use 1-64 letters`) {
		t.Fatalf("a bad --node-id was not refused with its fix: %v\n%s", err, out)
	}

	// Two nodes at the same moment, on a cluster that has not elected a
	// leader yet.
	argsA, argsB := node("a"), node("b")
	var a, b *nodeProc
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a = startNode(t, bin, argsA) }()
	go func() { defer wg.Done(); b = startNode(t, bin, argsB) }()
	wg.Wait()
	if a == nil || b == nil {
		t.FailNow()
	}
	idA, idB := keptNodeID(t, argsA), keptNodeID(t, argsB)
	if idA == idB {
		t.Fatalf("both nodes generated node id %q", idA)
	}
	// A third node given node a's id, as a copied config file would, is
	// refused while a runs.
	if out, err := exec.Command(bin, append(append([]string{"serve"}, node("dup")...), "--node-id", idA)...).CombinedOutput(); err == nil || !strings.Contains(string(out), "is in use by a running node") {
		t.Fatalf("a node with a running node's id was not refused: %v\n%s", err, out)
	}
	for _, n := range []struct {
		p  *nodeProc
		id string
	}{{a, idA}, {b, idB}} {
		if !strings.Contains(n.p.logText(), "node="+n.id) {
			t.Fatalf("node %s does not log its id:\n%s", n.id, n.p.logText())
		}
	}

	got := make(chan string, 64)
	onMsg := func(_ paho3.Client, m paho3.Message) { got <- string(m.Payload()) }
	sub := connectWith(t, a.addr, "cluster-sub", false, onMsg)
	if tok := sub.Subscribe("cluster/#", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe on node a: %v", tok.Error())
	}
	pub := connect(t, b.addr, "cluster-pub", true)
	publish(t, pub, "cluster/x", false, "one")
	expectPayload(t, got, "one", "published on node b, subscribed on node a")
	if tok := pub.Publish("cluster/zero", 0, false, "zero"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish QoS 0: %v", tok.Error())
	}
	expectPayload(t, got, "zero", "QoS 0, published on node b, subscribed on node a")
	sharedAcrossNodes(t, a, b, pub)

	// Add a node: the subscriber's session moves to it (taken over from
	// node a, which closes the old connection).
	argsC := node("c")
	c := startNode(t, bin, argsC)
	sub2 := connectWith(t, c.addr, "cluster-sub", false, onMsg)
	publish(t, pub, "cluster/x", false, "two")
	expectPayload(t, got, "two", "published on node b, session moved to node c")
	for deadline := time.Now().Add(10 * time.Second); sub.IsConnectionOpen(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the subscriber's old connection on node a is still open after the takeover by node c")
		}
	}

	// Remove node a: it stops cleanly, the others keep serving.
	a.stop(t)
	publish(t, pub, "cluster/x", false, "three")
	expectPayload(t, got, "three", "after node a stopped")

	// Restarted on its data directory, node a is the same node.
	a = startNode(t, bin, argsA)
	if !strings.Contains(a.logText(), "node="+idA) {
		t.Fatalf("restarted node a does not use its kept id %s:\n%s", idA, a.logText())
	}
	pubA := connect(t, a.addr, "cluster-pub-a", true)
	publish(t, pubA, "cluster/x", false, "four")
	expectPayload(t, got, "four", "published on the restarted node a")
	pubA.Disconnect(100)
	pub.Disconnect(100)
	sub2.Disconnect(100)
	willOfKilledNode(t, a, c)
	for _, n := range []*nodeProc{a, b, c} {
		n.stop(t)
	}
}

// willOfKilledNode kills node dead with SIGKILL while a client with a
// will and a persistent session is connected to it, and checks that a
// surviving node publishes the will, to a subscriber on node live,
// without dead ever starting again (docs/cluster.md, "Failover").
func willOfKilledNode(t *testing.T, live, dead *nodeProc) {
	t.Helper()
	wills := make(chan string, 4)
	watch := connectWith(t, live.addr, "will-watch", true, func(_ paho3.Client, m paho3.Message) { wills <- string(m.Payload()) })
	defer watch.Disconnect(100)
	if tok := watch.Subscribe("will/#", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe to wills: %v", tok.Error())
	}
	o := paho3.NewClientOptions().AddBroker("tcp://"+dead.addr).SetClientID("will-dev").SetCleanSession(false).
		SetProtocolVersion(4).SetAutoReconnect(false).SetWill("will/dev", "offline", 1, false)
	dev := paho3.NewClient(o)
	if tok := dev.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect will-dev: %v", tok.Error())
	}
	killed := time.Now()
	dead.Kill()
	select {
	case p := <-wills:
		if p != "offline" {
			t.Fatalf("will: %q", p)
		}
		t.Logf("the will of a client of the killed node was published %v after the kill", time.Since(killed).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatalf("the will of a client of the killed node was not published:\n%s", live.logText())
	}
}

// nodeProc is one `tidemark serve` process and its log.
type nodeProc struct {
	*serveProc
	addr string
}

func (p *nodeProc) logText() string { return p.Log() }

// startNode runs `tidemark serve args` and waits until it listens on its
// --mqtt address; opening on a cluster that is still starting may take a
// while. It reports failures with t.Error, so it can run beside others.
func startNode(t *testing.T, bin string, args []string) *nodeProc {
	t.Helper()
	addr := args[len(args)-1]
	p, err := proc.Start(proc.Spec{Name: "tidemark serve", Bin: bin, Args: append([]string{"serve"}, args...)})
	if err != nil {
		t.Error(err)
		return nil
	}
	t.Cleanup(func() { p.Kill() })
	if err := p.WaitListen(t.Context(), addr, 2*time.Minute, nil); err != nil {
		p.Kill()
		t.Errorf("serve %v: %v\n%s", args, err, p.Log())
		return nil
	}
	return &nodeProc{serveProc: &serveProc{p}, addr: addr}
}

// keptNodeID returns the node id a node keeps in its --data directory.
func keptNodeID(t *testing.T, args []string) string {
	t.Helper()
	var dir string
	for i, a := range args {
		if a == "--data" {
			dir = args[i+1]
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "node-id"))
	if err != nil {
		t.Fatalf("node id kept in %s: %v", dir, err)
	}
	return strings.TrimSpace(string(raw))
}

func expectPayload(t *testing.T, got <-chan string, want, what string) {
	t.Helper()
	select {
	case p := <-got:
		if p != want {
			t.Fatalf("%s: got %q, want %q", what, p, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: %q not delivered", what, want)
	}
}

// sharedAcrossNodes checks that a shared subscription with a member on
// node a and one on node b gets each of 20 messages once (docs/cluster.md,
// "What to know"), once both nodes report the group served by several.
func sharedAcrossNodes(t *testing.T, a, b *nodeProc, pub paho3.Client) {
	t.Helper()
	var na, nb atomic.Int64
	ma := connectWith(t, a.addr, "share-a", true, func(paho3.Client, paho3.Message) { na.Add(1) })
	mb := connectWith(t, b.addr, "share-b", true, func(paho3.Client, paho3.Message) { nb.Add(1) })
	defer ma.Disconnect(100)
	defer mb.Disconnect(100)
	for _, c := range []paho3.Client{ma, mb} {
		if tok := c.Subscribe("$share/g/shared/#", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("shared subscribe: %v", tok.Error())
		}
	}
	const spans = "served by several nodes"
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(a.logText(), spans) || !strings.Contains(b.logText(), spans); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the nodes do not log the shared group %q", spans)
		}
	}
	const n = 20
	for range n {
		publish(t, pub, "shared/x", false, "s")
	}
	for deadline := time.Now().Add(30 * time.Second); na.Load()+nb.Load() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shared group got %d+%d of %d messages", na.Load(), nb.Load(), n)
		}
	}
	time.Sleep(500 * time.Millisecond) // room for a message delivered twice to show
	if na.Load()+nb.Load() != n || na.Load() == 0 || nb.Load() == 0 {
		t.Fatalf("the shared group's members got %d (node a) and %d (node b) of %d messages, want each once, both some",
			na.Load(), nb.Load(), n)
	}
}
