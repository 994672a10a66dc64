package mqtt_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

// logText is a broker's log, for a test to wait for a line.
type logText struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logText) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count reports how many lines hold s.
func (l *logText) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// waitFor waits until the log has n lines holding s.
func (l *logText) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	for deadline := time.Now().Add(wait); l.count(s) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after %s:\n%s", s, wait, l.buf.String())
		}
	}
}

func (l *logText) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// A shared subscription with a member on each of two nodes sharing one
// store gets each message once, not once per node: the nodes publish
// their members in their presence records, and one pick, made alike on
// both, decides which node delivers. Once one node's member has gone, the
// other's gets everything.
func TestSharedSubscriptionAcrossNodes(t *testing.T) {
	var logA, logB logText
	a := startBroker(t, func(o *mqtt.Options) { o.NodeID, o.Logger = "A", logA.logger() })
	bAddr := startNode(t, a.DB(), "B", func(o *mqtt.Options) { o.Logger = logB.logger() })
	const spans = "served by several nodes"

	m1 := connect5(t, a.Addr, "share-m1", true, 0)
	m2 := connect5(t, bAddr, "share-m2", true, 0)
	m1.sub("$share/g/sn/#", 1)
	m2.sub("$share/g/sn/#", 1)
	logA.waitFor(t, spans, 1)
	logB.waitFor(t, spans, 1)

	pubA := connect5(t, a.Addr, "share-pa", true, 0)
	pubB := connect5(t, bAddr, "share-pb", true, 0)
	const n = 40
	for i := range n {
		p := pubA
		if i%2 == 1 {
			p = pubB
		}
		p.pub("sn/x", 1, false, "m")
	}
	got := map[string]int{}
	deadline := time.After(wait)
	for got["m1"]+got["m2"] < n {
		select {
		case <-m1.msgs:
			got["m1"]++
		case <-m2.msgs:
			got["m2"]++
		case <-deadline:
			t.Fatalf("the group got %d of %d messages: %v", got["m1"]+got["m2"], n, got)
		}
	}
	m1.expectNone(300 * time.Millisecond)
	m2.expectNone(0)
	if got["m1"] == 0 || got["m2"] == 0 {
		t.Fatalf("one member got all %d messages: %v", n, got)
	}

	m2.close()
	const single = "served by one node again"
	logA.waitFor(t, single, 1)
	logB.waitFor(t, single, 1)
	for range 10 {
		pubB.pub("sn/y", 1, false, "after")
	}
	m1.expect(10)
	m1.expectNone(300 * time.Millisecond)
}
