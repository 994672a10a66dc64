package message_test

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
)

// TestPayloadLen checks that PayloadLen reads the payload length of a
// stored form without decoding it, and gives 0 for one that does not
// decode, as the queued-bytes accounting relies on.
func TestPayloadLen(t *testing.T) {
	m := message.Message{Topic: "a/b", Payload: []byte("hello"), QoS: 1, From: "c", Expires: time.UnixMilli(1e12),
		ContentType: "text/plain", CorrelationData: []byte{1}, UserProps: []message.UserProperty{{Key: "k", Value: "v"}}}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if n := message.PayloadLen(b); n != len(m.Payload) {
		t.Fatalf("PayloadLen = %d, want %d", n, len(m.Payload))
	}
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], append(b, 0)} {
		if n := message.PayloadLen(bad); n != 0 {
			t.Errorf("PayloadLen(%x) = %d, want 0", bad, n)
		}
	}
}
