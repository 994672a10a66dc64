package mqttbench

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/tidemark-io/tidemark/engine"
)

// ServePeer runs the embedded peer name ("nats" or "mochi", see Peer) with
// its MQTT listener on addr and its data in dir, until ctx ends; then it
// stops the peer and returns what stopping it reported. It lets a
// benchmark that measures a broker as a process of its own (its resident
// memory and CPU time) run the embedded peers that way too.
func ServePeer(ctx context.Context, name, dir, addr string, mode engine.SyncMode, log *slog.Logger) error {
	t, err := Peer(name, mode, 0)
	if err != nil {
		return err
	}
	if t.startOn == nil {
		return fmt.Errorf("peer %q is not embedded: it runs as a program of its own", name)
	}
	in, err := t.startOn(ctx, dir, addr, log)
	if err != nil {
		return err
	}
	log.Info("peer listening", "peer", t.Name, "mqtt", in.addr)
	<-ctx.Done()
	return in.stop()
}
