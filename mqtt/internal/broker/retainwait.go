package broker

import (
	"context"
	"sync"

	"github.com/tidemark-io/tidemark/engine"
)

// pendingRetains holds the commits of retained QoS 0 messages that were
// submitted and not yet waited for, so that a SUBSCRIBE reads the
// retained messages the broker took before it.
//
// A QoS 0 PUBLISH is not acknowledged, so its retained write is not
// waited for; on an engine whose commit becomes readable only once its
// writer has committed it (Badger, LMDB), a SUBSCRIBE a moment later read the
// retained store without it. Its in-memory fan-out had already passed the
// new subscription by then, so the subscriber got neither the retained
// copy nor a live one. A SUBSCRIBE now waits, after its subscriptions are
// in the index, for the retained writes submitted before: each such
// message it either reads from the store or receives live.
type pendingRetains struct {
	mu sync.Mutex
	hs []*engine.Handle
}

// add records h, the commit of a retained write, dropping those done.
func (p *pendingRetains) add(h *engine.Handle) {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.hs[:0]
	for _, x := range p.hs {
		if !done(x) {
			live = append(live, x)
		}
	}
	clear(p.hs[len(live):])
	p.hs = append(live, h)
}

// wait returns once every commit added before it completed, or ctx ended.
func (p *pendingRetains) wait(ctx context.Context) {
	p.mu.Lock()
	if len(p.hs) == 0 {
		p.mu.Unlock()
		return
	}
	hs := append([]*engine.Handle(nil), p.hs...)
	p.mu.Unlock()
	for _, h := range hs {
		select {
		case <-h.Done():
		case <-ctx.Done():
			return
		}
	}
}
