package mqtt

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// startShared starts the follower of shared subscriptions when the first
// one is added (head is the log head read before its SUBACK, so every
// message published after it reaches the group). Until then no message
// has a shared subscriber, and a follower would wake and decode every
// message for nothing.
func (b *Broker) startShared(head table.Cursor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sharedStarted.Load() || b.closing {
		return
	}
	b.sharedStarted.Store(true)
	b.wg.Add(1)
	go b.followShared(head)
}

// startSharedNow is startShared at the current log head, for
// subscriptions restored with a session.
func (b *Broker) startSharedNow(ctx context.Context) error {
	if b.sharedStarted.Load() {
		return nil
	}
	head, err := b.db.Head(ctx)
	if err != nil {
		return err
	}
	b.startShared(head)
	return nil
}

// followShared routes QoS 1/2 messages of the log from head on to shared
// subscription groups: one online member of each matching group gets each
// message. Shared deliveries are not replayed for offline members (the
// group's other members take the traffic).
func (b *Broker) followShared(head table.Cursor) {
	defer b.wg.Done()
	for b.ctx.Err() == nil {
		_, err := b.db.Follow(b.ctx, table.SubscribeOptions{Table: tableMsgs, Start: head, IncludeSuperseded: true, Composite: true},
			func(ev table.Event) error {
				var m Message
				if m.UnmarshalBinary(ev.Value) == nil {
					b.fanout(&m, true)
				}
				return nil
			})
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("shared subscription follower restarts", "err", err)
			time.Sleep(100 * time.Millisecond)
		}
		for b.ctx.Err() == nil {
			if head, err = b.db.Head(b.ctx); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
