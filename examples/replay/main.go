// Command replay is an MQTT 5.0 client (paho.golang) that replays a topic
// filter's history from Tidemark and then follows it live, storing the
// position of each message it has printed so that the next run resumes
// right after it: no message is skipped, and only a crash between
// printing a message and storing its position prints that one again.
//
//	go run ./examples/replay -broker 127.0.0.1:1883 -filter 'sensors/#' -from -1h
//
// The first run starts at -from; later runs start after the position in
// -state (delete the file to start over). See docs/replay.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"

	"github.com/eclipse/paho.golang/paho"
)

func main() {
	var o options
	flag.StringVar(&o.broker, "broker", "127.0.0.1:1883", "broker address (host:port)")
	flag.StringVar(&o.filter, "filter", "#", "topic filter")
	flag.StringVar(&o.from, "from", "-1h", "where the first run starts: an RFC 3339 time, a negative duration or a position")
	flag.StringVar(&o.state, "state", "replay.position", "file keeping the position of the last message printed")
	flag.IntVar(&o.max, "n", 0, "stop after this many messages (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, o, os.Stdout)
	stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(1)
	}
}

type options struct {
	broker, filter, from, state string
	max                         int
}

// run subscribes with a replay from the stored position (or o.from) and
// prints each message as "topic payload", storing its position after.
func run(ctx context.Context, o options, out io.Writer) error {
	from := o.from
	if b, err := os.ReadFile(o.state); err == nil && strings.TrimSpace(string(b)) != "" {
		from = strings.TrimSpace(string(b))
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", o.state, err)
	}
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", o.broker)
	if err != nil {
		return fmt.Errorf("dial %s: %w", o.broker, err)
	}
	type delivery struct {
		topic, payload, pos string
	}
	msgs := make(chan delivery, 64)
	c := paho.NewClient(paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			d := delivery{topic: pr.Packet.Topic, payload: string(pr.Packet.Payload)}
			if pr.Packet.Properties != nil {
				d.pos = pr.Packet.Properties.User.Get("tidemark-position")
			}
			select {
			case msgs <- d:
			case <-ctx.Done():
			}
			return true, nil
		}},
	})
	if _, err := c.Connect(ctx, &paho.Connect{CleanStart: true, KeepAlive: 30}); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	ack, err := c.Subscribe(ctx, &paho.Subscribe{
		Subscriptions: []paho.SubscribeOptions{{Topic: o.filter, QoS: 1}},
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "tidemark-replay-from", Value: from}}},
	})
	if err != nil {
		return fmt.Errorf("subscribe %q from %s: %w", o.filter, from, err)
	}
	if len(ack.Reasons) != 1 || ack.Reasons[0] >= 0x80 {
		why := ""
		if ack.Properties != nil {
			why = ack.Properties.ReasonString
			if oldest := ack.Properties.User.Get("tidemark-oldest-position"); oldest != "" {
				why += " (oldest available position: " + oldest + ")"
			}
		}
		return fmt.Errorf("subscribe %q from %s refused: %s", o.filter, from, why)
	}
	for n := 0; o.max == 0 || n < o.max; n++ {
		var d delivery
		select {
		case d = <-msgs:
		case <-ctx.Done():
			return ctx.Err()
		}
		fmt.Fprintf(out, "%s %s\n", d.topic, d.payload)
		if d.pos == "" {
			return errors.New("a message came without tidemark-position: is the broker Tidemark?")
		}
		if err := os.WriteFile(o.state, []byte(d.pos+"\n"), 0o644); err != nil {
			return fmt.Errorf("store the position: %w", err)
		}
	}
	return nil
}
