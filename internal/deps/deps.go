//go:build deps

// Package deps pins the project's third-party modules in go.mod while the
// packages that use them are being written. It is never built.
package deps

import (
	_ "github.com/PowerDNS/lmdb-go/lmdb"
	_ "github.com/anishathalye/porcupine"
	_ "github.com/dgraph-io/badger/v4"
	_ "github.com/eclipse/paho.golang/paho"
	_ "github.com/eclipse/paho.mqtt.golang"
	_ "github.com/mochi-mqtt/server/v2"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/synadia-io/orbit.go/jetstreamext"
	_ "pgregory.net/rapid"
)
