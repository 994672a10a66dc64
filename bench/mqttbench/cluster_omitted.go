//go:build nojetstream

package mqttbench

import "errors"

// startNATSCluster reports that this build has no NATS server to run: a build
// that leaves the JetStream engine out leaves nats-server out as well.
func startNATSCluster(*runTB, int) (string, error) {
	return "", errors.New("this build leaves the JetStream engine out (tag nojetstream), and with it the NATS server the cluster benchmark runs")
}
