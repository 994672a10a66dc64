//go:build !nojetstream

package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// acker takes the stream's acknowledgements of the committer's messages
// on a channel subscription of its own, which nats.go fills from its
// reader goroutine. A request (what jetstream.JetStream.PublishMsg sends)
// is answered through the connection's response handler, a goroutine of
// its own: one more hand-off on every commit's path.
//
// Each publish gets a reply subject of its own, so an answer to an
// earlier publish that timed out is told apart and dropped.
type acker struct {
	prefix string
	n      uint64 // publishes so far; committer only
	ch     chan *nats.Msg
	sub    *nats.Subscription
}

// ackQueue is room for answers waiting for the committer: one is expected
// at a time, the rest are late answers to abandoned publishes.
const ackQueue = 64

func newAcker(nc *nats.Conn) (*acker, error) {
	a := &acker{prefix: nc.NewInbox() + ".", ch: make(chan *nats.Msg, ackQueue)}
	sub, err := nc.ChanSubscribe(a.prefix+"*", a.ch)
	if err != nil {
		return nil, fmt.Errorf("jetstream: subscribe to acknowledgements: %w", err)
	}
	a.sub = sub
	return a, nil
}

// publish sends m to the stream and waits for its acknowledgement, or
// until ctx ends. An error from the stream is a *jetstream.APIError.
func (a *acker) publish(ctx context.Context, nc *nats.Conn, m *nats.Msg) (*jetstream.PubAck, error) {
	a.n++
	m.Reply = a.prefix + strconv.FormatUint(a.n, 36)
	if err := nc.PublishMsg(m); err != nil {
		return nil, err
	}
	for {
		select {
		case r := <-a.ch:
			if r.Subject != m.Reply {
				continue
			}
			return parsePubAck(r)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// parsePubAck reads the stream's answer to a publish.
func parsePubAck(r *nats.Msg) (*jetstream.PubAck, error) {
	if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
		return nil, jetstream.ErrNoStreamResponse
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrInvalidJSAck, err)
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	if resp.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return &resp.PubAck, nil
}
