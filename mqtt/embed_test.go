package mqtt_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

func TestEmbeddedPublishReachesMQTTSubscriber(t *testing.T) {
	s := startBroker(t)
	c := connect5(t, s.Addr, "emb-sub", true, 0)
	c.sub("app/#", 1)
	ctx := ctxT(t)
	if err := s.Broker().Publish(ctx, mqtt.Message{Topic: "app/a", QoS: 1, Payload: []byte("from the app")}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	c.expectOne("app/a", "from the app")
	if err := s.Broker().Publish(ctx, mqtt.Message{Topic: "app/#", QoS: 1}); !errors.Is(err, mqtt.ErrInvalidTopic) {
		t.Fatalf("publish to a filter: %v, want ErrInvalidTopic", err)
	}
}

func TestEmbeddedSubscribeGetsMQTTPublishes(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.History = time.Hour })
	ctx := ctxT(t)
	got := make(chan mqtt.Delivery, 16)
	sub, err := s.Broker().Subscribe(ctx, "dev/+/temp", mqtt.SubscribeOptions{}, func(d mqtt.Delivery) error {
		got <- d
		return nil
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer sub.Close()
	c := connect5(t, s.Addr, "emb-pub", true, 0)
	c.pub("dev/1/temp", 1, false, "20")
	c.pub("dev/1/hum", 1, false, "skip")
	c.pub("dev/2/temp", 2, false, "21")
	first := recv(t, got, "dev/1/temp", "20")
	recv(t, got, "dev/2/temp", "21")

	// From a position: what came after it, then live.
	again := make(chan mqtt.Delivery, 16)
	resumed, err := s.Broker().Subscribe(ctx, "dev/+/temp", mqtt.SubscribeOptions{From: first.Position}, func(d mqtt.Delivery) error {
		again <- d
		return nil
	})
	if err != nil {
		t.Fatalf("subscribe from %s: %v", first.Position, err)
	}
	c.pub("dev/3/temp", 1, false, "22")
	recv(t, again, "dev/2/temp", "21")
	recv(t, again, "dev/3/temp", "22")

	// A handler error ends the subscription with it.
	stop := errors.New("enough")
	if _, err := s.Broker().Subscribe(ctx, "dev/#", mqtt.SubscribeOptions{From: "nonsense"}, func(mqtt.Delivery) error { return nil }); !errors.Is(err, mqtt.ErrReplayFrom) {
		t.Fatalf("subscribe from nonsense: %v, want ErrReplayFrom", err)
	}
	failing, err := s.Broker().Subscribe(ctx, "dev/#", mqtt.SubscribeOptions{From: "0"}, func(mqtt.Delivery) error { return stop })
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	select {
	case <-failing.Done():
	case <-time.After(wait):
		t.Fatalf("a subscription whose handler failed did not end")
	}
	if !errors.Is(failing.Err(), stop) {
		t.Fatalf("Err: %v, want the handler's error", failing.Err())
	}
	if err := resumed.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func recv(t *testing.T, ch <-chan mqtt.Delivery, topic, payload string) mqtt.Delivery {
	t.Helper()
	select {
	case d := <-ch:
		if d.Topic != topic || string(d.Payload) != payload || d.Position == "" {
			t.Fatalf("got %q %q at %q, want %q %q with a position", d.Topic, d.Payload, d.Position, topic, payload)
		}
		return d
	case <-time.After(wait):
		t.Fatalf("no delivery of %q", topic)
	}
	return mqtt.Delivery{}
}
