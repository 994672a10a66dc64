package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// runBroker serves MQTT on mqttAddr and the listeners of sec (and metrics
// on metricsAddr when set) until ctx ends, then shuts down: stop accepting,
// close connections (every acknowledged message is already durable),
// persist sessions, close the tables. SIGHUP reloads the password, ACL
// and TLS files. The caller closes the engine.
func runBroker(ctx context.Context, log *slog.Logger, es []engine.Engine, mqttAddr, metricsAddr string, sec *securityFlags, opts mqtt.Options) error {
	files, err := sec.access(&opts)
	if err != nil {
		return err
	}
	tc, err := sec.certificates()
	if err != nil {
		return err
	}
	parts, err := table.OpenPartitions(ctx, es, table.Options{Logger: log})
	if err != nil {
		return fmt.Errorf("open tables: %w", err)
	}
	defer parts.Close()
	b, err := mqtt.NewPartitioned(parts, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	lns, err := sec.listen(mqttAddr, tc, log)
	if err != nil {
		return err
	}
	logAccess(log, sec, files)
	log.Debug("connection cap", "max_connections", b.Options().MaxConnections)
	if metricsAddr != "" {
		stop, err := serveMetrics(ctx, log, metricsAddr, b, parts, es[0].Name())
		if err != nil {
			for _, l := range lns {
				l.ln.Close()
			}
			return fmt.Errorf("--metrics %s: %w", metricsAddr, err)
		}
		defer stop()
	}
	errc := make(chan error, len(lns))
	for _, l := range lns {
		log.Info("MQTT listening", "addr", l.ln.Addr().String(), "transport", l.kind)
		go func() { errc <- b.Serve(l.ln) }()
	}
	stopReload := reloadOnHangup(log, files, tc)
	defer stopReload()
	select {
	case <-ctx.Done():
		log.Info("shutting down: closing connections and persisting sessions (a second signal forces exit)")
	case err = <-errc:
	}
	return err
}
