//go:build !nojetstream

package mqttbench

import "github.com/tidemark-io/tidemark/engine/jetstream/jetstreamtest"

// startNATSCluster starts a NATS JetStream cluster of n servers on loopback in
// this process, stopped by tb's cleanups, and returns its client URLs
// once it has a JetStream leader.
func startNATSCluster(tb *runTB, n int) (string, error) {
	cl := jetstreamtest.StartCluster(tb, n)
	jetstreamtest.WaitMetaLeader(tb, cl.Servers)
	return cl.URLs(), nil
}
