package main

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/bench/mqttbench"
	"github.com/tidemark-io/tidemark/engine"
)

// peerBenchCmd is `tidemark bench peer`, hidden: an embedded peer broker
// (nats-server or mochi) as a process of its own, which `bench fleet`
// starts so that the peer's memory and CPU time are measured apart from
// the load generator's, as a Tidemark or mosquitto process's are.
func peerBenchCmd() *cobra.Command {
	var name, dir, addr, syncMode string
	cmd := &cobra.Command{
		Use:    "peer",
		Short:  "Run an embedded peer broker (nats or mochi) until stopped",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := engine.ParseSyncMode(syncMode)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			return mqttbench.ServePeer(cmd.Context(), name, dir, addr, mode, log)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "peer", "mochi", "the embedded peer: nats or mochi")
	fs.StringVar(&dir, "dir", "peer-data", "its data directory")
	fs.StringVar(&addr, "mqtt", "127.0.0.1:1883", "its MQTT listen address")
	fs.StringVar(&syncMode, "sync", "always", "nats-server's sync mode: always, interval or none (mochi has none)")
	return cmd
}
