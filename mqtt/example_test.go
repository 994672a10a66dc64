package mqtt_test

import (
	"context"
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
