package mqtt

import "github.com/tidemark-io/tidemark/mqtt/internal/broker"

// Delivery is a message an in-process subscription receives, with its
// position in the message log (the value a 5.0 client gets as
// PropPosition, and that SubscribeOptions.From accepts).
type Delivery struct {
	Message
	Position string
}

// SubscribeOptions configures Broker.Subscribe.
type SubscribeOptions struct {
	// From replays history first: the forms of PropReplayFrom (an RFC
	// 3339 time, a negative duration such as "-15m", or a Position). Empty
	// starts with the messages published after Subscribe returns.
	From string
}

// Subscription is an in-process subscription (see Broker.Subscribe).
type Subscription struct{ s *broker.Subscription }

// Close stops the subscription and waits until its handler has returned.
func (s *Subscription) Close() error { return s.s.Close() }

// Done is closed when the subscription has ended.
func (s *Subscription) Done() <-chan struct{} { return s.s.Done() }

// Err returns why the subscription ended once Done is closed: the
// handler's error, a read error (table.ErrHistoryUnavailable when
// retention overtook it), ctx's error, or nil after Close.
func (s *Subscription) Err() error { return s.s.Err() }
