package mqtt

import (
	"context"
	"time"
)

// ExpireSessionsAt runs the session expirer as it would run at now, for
// tests of what expiry frees without waiting for it.
func (b *Broker) ExpireSessionsAt(ctx context.Context, now time.Time) error {
	return b.b.ExpireSessionsAt(ctx, now)
}
