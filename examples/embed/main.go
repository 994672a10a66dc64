// Command embed is an application that embeds Tidemark's table layer and
// its MQTT broker in one process, with no socket between them:
//
//   - what devices publish to devices/<id>/temp (QoS 1 or 2) is written to
//     the application's "readings" table, one record per device;
//   - what the application writes to its "settings" table reaches MQTT
//     subscribers as a retained message on settings/<id> (a deleted
//     setting clears it).
//
// Run it, then talk to it with any MQTT client:
//
//	go run ./examples/embed -data /tmp/embed -mqtt 127.0.0.1:1883
//	mosquitto_sub -t 'settings/#' -v          # interval 10s
//	mosquitto_pub -q 1 -t devices/d1/temp -m 21.5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

func main() {
	dir := flag.String("data", "embed-data", "data directory")
	addr := flag.String("mqtt", "127.0.0.1:1883", "MQTT listen address")
	flag.Parse()
	if err := run(*dir, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

// run serves until interrupted; the application closes before it
// returns, an error included.
func run(dir, addr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	a, err := start(ctx, dir, addr)
	if err != nil {
		return err
	}
	defer a.close()
	// The application's own write: it reaches MQTT subscribers.
	if err := a.setSetting(ctx, "interval", "10s"); err != nil {
		return err
	}
	slog.Info("running", "mqtt", a.ln.Addr().String())
	<-ctx.Done()
	return nil
}

// app is the application: its tables and the broker beside them.
type app struct {
	e    engine.Engine
	db   *table.DB
	b    *mqtt.Broker
	ln   net.Listener
	subs []interface{ Close() error }
}

// start opens the store, starts the broker on addr and the two bridges.
func start(ctx context.Context, dir, addr string) (a *app, err error) {
	a = &app{}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	if a.e, err = engine.Open(ctx, "pebble", engine.Options{Dir: dir}); err != nil {
		return nil, err
	}
	if a.db, err = table.Open(ctx, a.e, table.Options{}); err != nil {
		return nil, err
	}
	if a.b, err = mqtt.New(a.db, mqtt.Options{}); err != nil {
		return nil, err
	}
	if a.ln, err = net.Listen("tcp", addr); err != nil {
		return nil, err
	}
	go func() { _ = a.b.Serve(a.ln) }()

	// MQTT -> table: each reading becomes the device's record.
	readings, err := a.b.Subscribe(ctx, "devices/+/temp", mqtt.SubscribeOptions{}, func(d mqtt.Delivery) error {
		device := strings.Split(d.Topic, "/")[1]
		return a.db.Update(ctx, func(tx *table.Tx) error {
			return tx.Put("readings", device, d.Payload)
		})
	})
	if err != nil {
		return nil, err
	}
	a.subs = append(a.subs, readings)

	// table -> MQTT: each change of a setting, from now on, as a
	// retained message.
	head, err := a.db.Head(ctx)
	if err != nil {
		return nil, err
	}
	settings, err := a.db.Subscribe(ctx, table.SubscribeOptions{Table: "settings", Start: head, IncludeSuperseded: true})
	if err != nil {
		return nil, err
	}
	a.subs = append(a.subs, settings)
	go func() {
		for ev := range settings.Events() {
			m := mqtt.Message{Topic: "settings/" + ev.ID, QoS: 1, Retain: true, Payload: ev.Value}
			if ev.Op == table.OpDelete {
				m.Payload = nil // clears the retained message
			}
			if err := a.b.Publish(ctx, m); err != nil && !errors.Is(err, context.Canceled) {
				slog.Warn("publish a setting", "id", ev.ID, "err", err)
				continue
			}
			_ = settings.Ack(ev)
		}
	}()
	return a, nil
}

// setSetting writes one setting.
func (a *app) setSetting(ctx context.Context, id, value string) error {
	return a.db.Update(ctx, func(tx *table.Tx) error { return tx.Put("settings", id, []byte(value)) })
}

// reading returns a device's last reading.
func (a *app) reading(ctx context.Context, device string) (string, error) {
	r, err := a.db.Get(ctx, "readings", device)
	return string(r.Value), err
}

func (a *app) close() {
	for _, s := range a.subs {
		_ = s.Close()
	}
	if a.b != nil {
		_ = a.b.Close()
	}
	if a.db != nil {
		_ = a.db.Close()
	}
	if a.e != nil {
		_ = a.e.Close()
	}
}
