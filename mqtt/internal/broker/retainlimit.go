package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// limitRetained is the name of Options.MaxRetained in Stats.LimitHits.
const limitRetained = "retained"

// retainedCount counts the retained messages for Options.MaxRetained: the
// store's count when the broker started, then this node's own changes.
// Concurrent publishes to new topics may take it a few past the limit;
// with several nodes on one store each counts only what it saw.
type retainedCount struct {
	mu     sync.Mutex
	n      int
	warned time.Time
}

// countRetained reads how many retained messages the store holds; only a
// broker with Options.MaxRetained pays for it.
func (b *Broker) countRetained(ctx context.Context) error {
	if b.opts.MaxRetained <= 0 {
		return nil
	}
	n := 0
	// On a split store a topic may have a copy, or a cleared marker, in
	// several partitions: the count is then an upper bound.
	err := b.rangeAll(ctx, tableRetained, "", func(int, table.Record) bool { n++; return true })
	if err != nil {
		return fmt.Errorf("mqtt: counting retained messages: %w", err)
	}
	b.retained.mu.Lock()
	b.retained.n = n
	b.retained.mu.Unlock()
	return nil
}

// admitRetained reports whether the retained message m may be stored:
// a replacement or a delete always, a new topic only below
// Options.MaxRetained. A message refused here is still published, not
// retained (counted as limit "retained" and logged at most once a
// minute): dropping the RETAIN keeps the delivery a client asked for and
// refuses only the storage the operator capped.
func (b *Broker) admitRetained(m *Message) bool {
	max := b.opts.MaxRetained
	if max <= 0 {
		return true
	}
	_, _, err := b.parts.GetLatest(b.ctx, tableRetained, m.Topic)
	exists := err == nil
	if err != nil && !errors.Is(err, table.ErrNotFound) {
		return true // the commit will meet the store's trouble itself
	}
	r := &b.retained
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case len(m.Payload) == 0:
		if exists {
			r.n--
		}
		return true
	case exists:
		return true
	case r.n < max:
		r.n++
		return true
	}
	b.metrics.LimitRetained.Add(1)
	if now := time.Now(); now.Sub(r.warned) >= time.Minute {
		r.warned = now
		b.log.Warn("retained message limit reached: new retained topics are published but not retained", "limit", max, "topic", m.Topic)
	}
	return false
}
