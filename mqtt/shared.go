package mqtt

import (
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// followShared routes QoS 1/2 messages of the log to shared subscription
// groups: one online member of each matching group gets each message.
// Shared deliveries are not replayed for offline members (the group's
// other members take the traffic).
func (b *Broker) followShared() {
	defer b.wg.Done()
	for b.ctx.Err() == nil {
		head, err := b.db.Head(b.ctx)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_, err = b.db.Follow(b.ctx, table.SubscribeOptions{Table: tableMsgs, Start: head, IncludeSuperseded: true, Composite: true},
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
	}
}
