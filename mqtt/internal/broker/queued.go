package broker

import (
	"context"
)

// beginQueueCut registers a move of client's checkpoint by the queue
// limits (queuelimit.Limiter.BeginCut) unless client is online here:
// under b.mu, with the registration of connections, so a connection
// registered after it waits for it (awaitQueueCut) and one registered
// before it stops it.
func (b *Broker) beginQueueCut(client string) (end func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, on := b.conns[client]; on {
		return nil, false
	}
	if b.cutting == nil {
		b.cutting = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	b.cutting[client] = done
	return func() {
		b.mu.Lock()
		delete(b.cutting, client)
		b.mu.Unlock()
		close(done)
	}, true
}

// awaitQueueCut waits until no retention move of client's checkpoint is
// under way. A connection calls it once registered, before it reads its
// session: a move that has not started by then does not start.
func (b *Broker) awaitQueueCut(ctx context.Context, client string) {
	b.mu.Lock()
	done := b.cutting[client]
	b.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}
