package broker

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
)

// maxStateDeletes bounds the deletions of session state in one commit:
// a quarter of engine.MaxBatchEntries (each is up to two engine entries,
// record and version), less on an engine whose atomic commits are smaller
// (JetStream on a server limiting atomic batches to 1000 messages), where
// room is left for the held-back exchange endings (two entries each) and
// the session record that ride in the same commit. It is read at each
// use: such an engine may learn a lower limit while it runs.
func (b *Broker) maxStateDeletes() int {
	limit := engine.MaxCommitEntries(b.db.Engine())
	return max(1, min(engine.MaxBatchEntries/4, (limit-2*b.maxLazy()-16)/2))
}

// maxLazy bounds the exchange endings a connection holds back (see
// delivery.MaxLazyEnds): that, or an eighth of a smaller engine commit limit.
func (b *Broker) maxLazy() int {
	return max(1, min(delivery.MaxLazyEnds, engine.MaxCommitEntries(b.db.Engine())/8))
}

// expireSessions deletes offline sessions whose expiry interval passed.
// It reads the expiry index up to now, so a pass costs what is due, not
// the number of sessions.
func (b *Broker) expireSessions() {
	defer b.wg.Done()
	for _, st := range b.stores {
		if err := st.IndexExpiries(b.ctx); err != nil && b.ctx.Err() == nil {
			b.log.Warn("building the session expiry index", "err", err)
		}
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if err := b.ExpireSessionsAt(b.ctx, time.Now()); err != nil && b.ctx.Err() == nil {
			b.log.Warn("session expiry failed", "err", err)
		}
	}
}

// ExpireSessionsAt runs the session expirer as it would run at now, for
// tests of what expiry frees without waiting for it.
func (b *Broker) ExpireSessionsAt(ctx context.Context, now time.Time) error {
	for _, st := range b.stores {
		if err := st.ExpireDue(ctx, now); err != nil {
			return err
		}
	}
	return nil
}
