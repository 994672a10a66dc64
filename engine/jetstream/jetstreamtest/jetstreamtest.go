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
	ports := freePorts(t, n)
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	base := t.TempDir()
	var servers []*server.Server
	for i, p := range ports {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			NoSigs:     true,
			NoLog:      true,
			JetStream:  true,
			StoreDir:   filepath.Join(base, fmt.Sprintf("n%d", i+1)),
			Cluster:    server.ClusterOpts{Name: "tidemark-test", Host: "127.0.0.1", Port: p},
			Routes:     routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("server %d: %v", i+1, err)
		}
		s.Start()
		servers = append(servers, s)
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	for _, s := range servers {
		// Generous: the test machine may be busy.
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %s not ready", s.Name())
		}
	}
	return servers
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
