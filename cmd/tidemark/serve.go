package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/tidemark-io/tidemark/engine"
)

func serveCmd() *cobra.Command {
	var ef engineFlags
	var mqttAddr string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the broker",
		Example: `  tidemark serve                         # Pebble in ./data, MQTT on 127.0.0.1:1883
  tidemark serve --engine badger --data /var/lib/tidemark
  tidemark serve --engine jetstream --nats-url nats://127.0.0.1:4222 --replicas 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := ef.options()
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			opts.Logger = log
			ctx := cmd.Context()
			e, err := engine.Open(ctx, ef.name, opts)
			if err != nil {
				return fmt.Errorf("open engine: %w", err)
			}
			log.Info("engine open", "engine", ef.name, "data", ef.data, "sync", opts.Sync.String(), "granularity", e.Granularity().String())
			err = runBroker(ctx, log, e, mqttAddr)
			if cerr := e.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("close engine: %w", cerr)
			}
			log.Info("stopped")
			return err
		},
	}
	ef.register(cmd.Flags())
	cmd.Flags().StringVar(&mqttAddr, "mqtt", envOr("TIDEMARK_MQTT", "127.0.0.1:1883"), "MQTT TCP listen address (env TIDEMARK_MQTT)")
	return cmd
}
