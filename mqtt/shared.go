package mqtt

import (
	"context"

	"github.com/tidemark-io/tidemark/table"
)

// startShared turns on the routing of log messages to shared
// subscription groups when the first one is added. Until then no message
// has a shared subscriber, and the router need not decode any.
func (b *Broker) startShared(table.Cursor) {
	b.sharedStarted.Store(true)
}

// startSharedNow is startShared for subscriptions restored with a session.
func (b *Broker) startSharedNow(context.Context) error {
	b.sharedStarted.Store(true)
	return nil
}
