// Package jetstreamtest starts real NATS JetStream clusters on loopback
// for tests of the jetstream engine and of Tidemark nodes sharing one
// stream. It lives under engine/jetstream because it imports the NATS
// server, which nothing outside the engine's directory imports.
package jetstreamtest

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tidemark-io/tidemark/internal/freeport"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// StartServers starts an n-server JetStream cluster on 127.0.0.1 (random
// client ports, cluster routes between all of them) with the server
// defaults (1000 messages per atomic batch, 1 MB payloads), and returns
// once every server takes connections, before the cluster elected its
// leaders. The servers shut down when the test ends.
func StartServers(t TB, n int) []*server.Server {
	t.Helper()
	return StartCluster(t, n).Servers
}

// Cluster is a test cluster whose servers can be stopped and started
// again, as an operator's servers fail and come back.
type Cluster struct {
	t    TB
	opts []*server.Options
	// Servers holds the running server of each slot; a stopped slot
	// keeps its last server until Restart replaces it.
	Servers []*server.Server
	running []bool
}

// StartCluster is StartServers, returning the cluster.
func StartCluster(t TB, n int) *Cluster {
	t.Helper()
	ports := freePorts(t, n)
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	base := t.TempDir()
	c := &Cluster{t: t}
	for i, p := range ports {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoSigs:     true,
			NoLog:      true,
			JetStream:  true,
			StoreDir:   filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			Cluster:    server.ClusterOpts{Name: "tidemark-test", Host: "127.0.0.1", Port: p},
			Routes:     routes,
		})
		c.Servers = append(c.Servers, nil)
		c.running = append(c.running, false)
		c.start(i)
	}
	for _, s := range c.Servers {
		// Generous: the test machine may be busy.
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", s.Name())
		}
	}
	return c
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	o := *c.opts[i] // the server keeps and edits its options
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("server %d: %v", i+1, err)
	}
	s.Start()
	c.Servers[i], c.running[i] = s, true
	c.t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
}

// Stop shuts server i down and waits until it is gone.
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
	c.running[i] = false
}

// Restart starts server i again on its store and cluster port (its
// client port is a new random one) and waits until it takes connections.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.start(i)
	if !c.Servers[i].ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("server %s not ready after a restart", c.Servers[i].Name())
	}
}

// StreamLeader returns the index of the running server that leads stream
// (in the global account), or -1 while none does.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Servers {
		if c.running[i] && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// URLs returns the client URLs of the running servers (see ClientURLs).
func (c *Cluster) URLs() string {
	var run []*server.Server
	for i, s := range c.Servers {
		if c.running[i] {
			run = append(run, s)
		}
	}
	return ClientURLs(run)
}

// WaitMetaLeader waits until one of servers leads the JetStream cluster.
func WaitMetaLeader(t TB, servers []*server.Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no JetStream meta leader among %d servers", len(servers))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ClientURLs returns the client URLs of servers, comma-separated, as the
// engine's url parameter and `serve --nats-url` take them.
func ClientURLs(servers []*server.Server) string {
	var us []string
	for _, s := range servers {
		us = append(us, s.ClientURL())
	}
	return strings.Join(us, ",")
}

// freePorts picks n loopback ports for the servers to bind.
func freePorts(t TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			t.Fatalf("reserve port: %v", err)
		}
		ports[i] = p
	}
	return ports
}
