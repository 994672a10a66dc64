package broker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/delivery"
	"github.com/tidemark-io/tidemark/table"
)

// retentionLoop truncates the message log below the lowest persisted
// checkpoint of all sessions, every Options.RetentionEvery.
//
// An offline session's persisted checkpoint bounds truncation; an online
// session's acknowledged one does (see liveCheckpoint). With
// Options.MaxQueuedMessages or Options.MaxQueuedBytes, an offline
// session holding more of its own messages than that loses its oldest
// first: its checkpoint moves up (package queuelimit), and the log below goes.
// A session that never returns stops holding it when it expires
// (Options.SessionExpiry).
func (b *Broker) retentionLoop() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.RetentionEvery)
	defer t.Stop()
	seeded := b.rules == nil
	for {
		if !seeded {
			// Locate the rules' messages in what the log retained from
			// before this start; retention waits for it.
			if err := b.rules.Seed(b.ctx, b.db); err != nil {
				if b.ctx.Err() == nil {
					b.log.Warn("retention rules: reading the message log failed", "err", err)
				}
			} else {
				seeded = true
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if err := b.Retain(b.ctx); err != nil && b.ctx.Err() == nil {
			b.log.Warn("retention pass failed", "err", err)
		}
	}
}

// Retain runs one retention pass now (see retentionLoop). It reads the
// checkpoint index from the bottom (session.Store.LowestCheckpoint), so a pass costs
// what the sessions below the lowest offline checkpoint cost, not a read
// of every stored session; with the queue limits, what the sessions
// further behind than a limit cost (package queuelimit).
func (b *Broker) Retain(ctx context.Context) error {
	heads, err := b.head(ctx)
	if err != nil {
		return err
	}
	if b.opts.MaxQueuedMessages > 0 || b.opts.MaxQueuedBytes > 0 {
		for _, l := range b.queues {
			if err := l.Limit(ctx, heads.Of(l.Part)); err != nil {
				return fmt.Errorf("mqtt: queued-message limit: %w", err)
			}
		}
	}
	if err := b.dropOrphanQueues(ctx); err != nil {
		return fmt.Errorf("mqtt: shared groups' queues: %w", err)
	}
	for p := range b.parts.Count() {
		if err := b.retainPartition(ctx, p, heads.Of(p)); err != nil {
			return fmt.Errorf("mqtt: retention of partition %d: %w", p, err)
		}
	}
	return nil
}

// retainPartition truncates the log of partition p, whose head is head,
// below what every session and rule still needs of it. A session's
// record may be in any partition: each one's index is read for p.
// History and retention rules are a store of one partition's (see
// checkPartitioned).
func (b *Broker) retainPartition(ctx context.Context, p int, head table.Cursor) error {
	low := head
	for _, st := range b.stores {
		l, ok, err := st.LowestCheckpoint(ctx, p, head)
		if err != nil || !ok {
			return err
		}
		if l.Less(low) {
			low = l
		}
	}
	db := b.parts.DB(p)
	st, err := db.LogStats(ctx)
	if err != nil {
		return err
	}
	if h := b.opts.History; h > 0 {
		if keep := b.history.floor(time.Now(), h, head); keep.Less(low) {
			low = keep
		}
	}
	if b.rules != nil {
		keep, ok := b.rules.Floor(time.Now(), low)
		if !ok {
			return nil // the rules' messages are not located yet
		}
		low = keep
	}
	if low.Key == 0 {
		return nil
	}
	if st.Entries == 0 || low.Key < st.First {
		return nil
	}
	if err := db.TruncateBelow(ctx, low.Coarse()); err != nil {
		return err
	}
	b.metrics.Truncations.Add(1)
	return nil
}

// onlineCheckpoint returns the acknowledged checkpoint of client in
// partition part of the log when it is online on this node (see
// liveCheckpoint), at least persisted.
func (b *Broker) onlineCheckpoint(client string, part int, persisted table.Cursor) (table.Cursor, bool) {
	b.mu.Lock()
	_, on := b.conns[client]
	b.mu.Unlock()
	if !on {
		return persisted, false
	}
	return b.liveCheckpoint(client, part, persisted), true
}

// liveCheckpoint returns an online session's acknowledged checkpoint, which
// is newer than the persisted one: what lies between them the client has
// acknowledged, so a resume after a crash may skip it without loss.
func (b *Broker) liveCheckpoint(client string, part int, persisted table.Cursor) table.Cursor {
	var out *delivery.Session
	b.mu.Lock()
	if c := b.conns[client]; c != nil {
		out = c.out // set under b.mu by connect
	}
	b.mu.Unlock()
	if out == nil {
		return persisted
	}
	if all, ok := out.CheckpointNow(); ok {
		if cp := all.Of(part); persisted.Less(cp) {
			// An idle session writes its checkpoint only when asked, so
			// its index entry moves up out of the way of the next passes
			// and a resume after a crash scans less. Not at every pass:
			// once anything is published, the log moves past every
			// online session, and asking them all would cost a commit
			// per online session and pass. A resume below the
			// truncation skips the gap, which holds nothing the session
			// has not acknowledged.
			if out.PersistedBefore(time.Now().Add(-askAfterPasses * b.opts.RetentionEvery)) {
				out.AskPersist()
			}
			return cp
		}
	}
	return persisted
}

// askAfterPasses is how many retention periods an online session's
// written checkpoint may age before a pass asks it to write it again (see
// liveCheckpoint).
const askAfterPasses = 6

// indexEvery is how long an online session's checkpoint writes may leave
// its checkpoint index entry below its checkpoint (delivery.Env's
// IndexEvery): as long as its written checkpoint may age before a pass
// asks for a write, so that write moves the entry. A pass takes the
// session's checkpoint from memory meanwhile. Not on a store other nodes
// share: their passes cannot, and would write every such entry again.
func (b *Broker) indexEvery() time.Duration {
	if b.sharedStore() {
		return 0
	}
	return askAfterPasses * b.opts.RetentionEvery
}

// historyIndex remembers the log head at each retention pass, so that
// Options.History can be kept without reading message times: every
// message at or below a head sampled at t was committed before t.
type historyIndex struct {
	mu      sync.Mutex
	samples []historySample
}

type historySample struct {
	at   time.Time
	head table.Cursor
}

// floor records head at now and returns the cursor below which every
// message is older than keep: the newest head sampled at least keep ago,
// or the zero cursor (keep everything) when none was.
func (h *historyIndex) floor(now time.Time, keep time.Duration, head table.Cursor) table.Cursor {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, historySample{at: now, head: head})
	cut := now.Add(-keep)
	i := 0
	for i+1 < len(h.samples) && !h.samples[i+1].at.After(cut) {
		i++
	}
	h.samples = h.samples[i:] // the older ones are never needed again
	if h.samples[0].at.After(cut) {
		return table.Cursor{}
	}
	return h.samples[0].head
}
