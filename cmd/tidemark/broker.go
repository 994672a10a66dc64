package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// runBroker serves MQTT on mqttAddr (and metrics on metricsAddr when set)
// until ctx ends, then shuts down: stop accepting, close connections (every
// acknowledged message is already durable), persist sessions, close the
// tables. The caller closes the engine.
func runBroker(ctx context.Context, log *slog.Logger, e engine.Engine, mqttAddr, metricsAddr string, opts mqtt.Options) error {
	db, err := table.Open(ctx, e, table.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open tables: %w", err)
	}
	defer db.Close()
	b, err := mqtt.New(db, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	ln, err := net.Listen("tcp", mqttAddr)
	if err != nil {
		return fmt.Errorf("--mqtt %s: %w", mqttAddr, err)
	}
	log.Info("MQTT listening", "addr", ln.Addr().String(), "max_connections", b.Options().MaxConnections)
	if metricsAddr != "" {
		stop, err := serveMetrics(ctx, log, metricsAddr, b, db, e.Name())
		if err != nil {
			ln.Close()
			return fmt.Errorf("--metrics %s: %w", metricsAddr, err)
		}
		defer stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- b.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("shutting down: closing connections and persisting sessions (a second signal forces exit)")
	case err = <-errc:
	}
	return err
}
