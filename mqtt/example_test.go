package mqtt_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/tidemark-io/tidemark/engine"
	_ "github.com/tidemark-io/tidemark/engine/pebble" // registers "pebble"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/table"
)

// A broker embedded in an application, which publishes to it and
// subscribes to it in process, without a socket. Serve(listener) would
// let MQTT clients in beside it.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tidemark-mqtt-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	b, err := mqtt.New(db, mqtt.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	got := make(chan mqtt.Delivery)
	sub, err := b.Subscribe(ctx, "sensors/#", mqtt.SubscribeOptions{}, func(d mqtt.Delivery) error {
		got <- d
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	// Durable in the message log when Publish returns.
	err = b.Publish(ctx, mqtt.Message{Topic: "sensors/kitchen/temp", QoS: 1, Payload: []byte("21.5")})
	if err != nil {
		log.Fatal(err)
	}
	d := <-got
	fmt.Printf("%s %s\n", d.Topic, d.Payload)
	// Output: sensors/kitchen/temp 21.5
}

// Tables as topics: with Options.TablesPrefix, a retained publication on
// tables/<table>/<id> writes the record <id> of table <table>, which the
// application reads (and subscribes to) through package table; what the
// application writes there reaches MQTT subscribers of tables/<table>/#.
func ExampleOptions_tablesPrefix() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tidemark-tables-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	e, err := engine.Open(ctx, "pebble", engine.Options{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	db, err := table.Open(ctx, e, table.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	b, err := mqtt.New(db, mqtt.Options{TablesPrefix: "tables/"})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	// As a device's retained PUBLISH would: durable when Publish returns.
	err = b.Publish(ctx, mqtt.Message{Topic: "tables/settings/interval", QoS: 1, Retain: true, Payload: []byte("10s")})
	if err != nil {
		log.Fatal(err)
	}
	r, err := db.Get(ctx, "settings", "interval")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s/%s = %s\n", r.Table, r.ID, r.Value)

	// Names the broker cannot use are refused.
	err = b.Publish(ctx, mqtt.Message{Topic: "tables/mqtt.sessions/x", QoS: 1, Retain: true, Payload: []byte("x")})
	fmt.Println(errors.Is(err, mqtt.ErrTableTopic))
	// Output:
	// settings/interval = 10s
	// true
}
