package mqtt_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

func fullMessage() *mqtt.Message {
	return &mqtt.Message{
		Topic: "a/b/c", Payload: []byte("payload"), QoS: 2, Retain: true, From: "client-1",
		Expires: time.UnixMilli(1_700_000_000_123), PayloadFormat: 1, HasFormat: true,
		ContentType: "text/plain", ResponseTopic: "reply/to", CorrelationData: []byte{1, 2, 3},
		UserProps: []mqtt.UserProperty{{Key: "k", Value: "v"}, {Key: "k", Value: "again"}},
	}
}

// TestMessageRoundTrip encodes a message with every field set and one
// with none, decodes both and compares; MarshalBinary allocates once.
func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*mqtt.Message{fullMessage(), {Topic: "t", Payload: []byte{}}} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got mqtt.Message
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&got, m) {
			t.Fatalf("decoded %+v, want %+v", got, *m)
		}
	}
	long := fullMessage()
	long.From = strings.Repeat("c", 200)
	long.UserProps = append(long.UserProps, mqtt.UserProperty{Key: strings.Repeat("k", 300), Value: strings.Repeat("v", 300)})
	if n := testing.AllocsPerRun(100, func() { _, _ = long.MarshalBinary() }); n != 1 {
		t.Fatalf("MarshalBinary allocated %v times, want 1", n)
	}
}

// FuzzMessageUnmarshal feeds arbitrary bytes to UnmarshalBinary: it
// returns ErrCorruptMessage or a message that encodes back to the same
// bytes, and never panics.
func FuzzMessageUnmarshal(f *testing.F) {
	b, _ := fullMessage().MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		var m mqtt.Message
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, mqtt.ErrCorruptMessage) {
				t.Fatalf("error %v is not ErrCorruptMessage", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var m2 mqtt.Message
		if err := m2.UnmarshalBinary(again); err != nil || !reflect.DeepEqual(&m2, &m) {
			t.Fatalf("re-encoded message decodes to %+v (%v), want %+v", m2, err, m)
		}
	})
}
