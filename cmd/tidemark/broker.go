package main

import (
	"context"
	"log/slog"

	"github.com/tidemark-io/tidemark/engine"
)

// runBroker serves until ctx ends.
func runBroker(ctx context.Context, log *slog.Logger, e engine.Engine, mqttAddr string) error {
	log.Info("serving (MQTT listener not built yet)", "mqtt", mqttAddr)
	<-ctx.Done()
	return nil
}
