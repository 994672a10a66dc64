package main

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/tidemark-io/tidemark/table"
)

// TestAppAndMQTTReachEachOther: the application's table write reaches an
// MQTT subscriber, and an MQTT publish reaches the application's table.
func TestAppAndMQTTReachEachOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := start(ctx, t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()

	nc, err := net.Dial("tcp", a.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *paho.Publish, 8)
	c := paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil },
	}})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "device-d1", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "settings/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	if err := a.setSetting(ctx, "interval", "10s"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.Topic != "settings/interval" || string(p.Payload) != "10s" {
			t.Fatalf("got %q %q, want settings/interval 10s", p.Topic, p.Payload)
		}
	case <-ctx.Done():
		t.Fatal("the application's write did not reach the MQTT subscriber")
	}

	if _, err := c.Publish(ctx, &paho.Publish{Topic: "devices/d1/temp", QoS: 1, Payload: []byte("21.5")}); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := a.reading(ctx, "d1")
		if err == nil {
			if v != "21.5" {
				t.Fatalf("reading of d1: %q, want 21.5", v)
			}
			break
		}
		if !errors.Is(err, table.ErrNotFound) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the MQTT publish did not reach the application's table")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
