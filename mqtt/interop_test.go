package mqtt_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestInteropMQTTJS runs the MQTT.js client (mqtt/interop/interop.js)
// against a broker: QoS 0/1/2 publish and subscribe on 3.1.1 and 5.0 and a
// persistent-session reconnect. Node and the npm packages are part of the
// test environment (`make test` runs npm ci in mqtt/interop), so their absence
// fails the test rather than skipping it.
func TestInteropMQTTJS(t *testing.T) {
	node, dir := mqttJS(t)
	s := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "interop.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TIDEMARK_MQTT_URL=mqtt://"+s.Addr)
	out, err := cmd.CombinedOutput()
	t.Logf("interop.js output:\n%s", out)
	if err != nil {
		t.Fatalf("interop.js: %v", err)
	}
}

// mqttJS returns the node binary and the mqtt/interop folder holding
// MQTT.js. Both are part of the test environment (`make test` runs npm ci
// there), so their absence fails the test, naming the step.
func mqttJS(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): install Node.js 18+ and run `npm ci` in mqtt/interop", err)
	}
	if dir, err = filepath.Abs("interop"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mqtt", "package.json")); err != nil {
		t.Fatalf("MQTT.js is not installed (%v): run `npm ci` in mqtt/interop", err)
	}
	return node, dir
}
