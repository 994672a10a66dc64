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

// runBroker serves MQTT on mqttAddr until ctx ends, then shuts down: stop
// accepting, close connections (every acknowledged message is already
// durable), persist sessions, close the tables.
func runBroker(ctx context.Context, log *slog.Logger, e engine.Engine, mqttAddr string) error {
	db, err := table.Open(ctx, e, table.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open tables: %w", err)
	}
	defer db.Close()
	b, err := mqtt.New(db, mqtt.Options{Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", mqttAddr)
	if err != nil {
		b.Close()
		return fmt.Errorf("--mqtt %s: %w", mqttAddr, err)
	}
	log.Info("MQTT listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- b.Serve(ln) }()
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-errc:
	}
	b.Close()
	return err
}
