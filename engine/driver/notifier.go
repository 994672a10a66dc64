package driver

import (
	"context"
	"sync"
)

// Notifier fans a coalesced "something new" signal out to watchers. Backends
// use it to implement Watch: a watcher's channel holds at most one pending
// signal, so a slow watcher never blocks a commit and never misses that
// something happened since it last looked.
type Notifier struct {
	mu     sync.Mutex
	subs   map[chan struct{}]struct{}
	closed bool
}

// Subscribe returns a channel that receives a signal after each Notify
// (coalesced) and is closed when ctx ends or the notifier closes.
func (n *Notifier) Subscribe(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		close(ch)
		return ch
	}
	if n.subs == nil {
		n.subs = make(map[chan struct{}]struct{})
	}
	n.subs[ch] = struct{}{}
	n.mu.Unlock()
	if ctx.Done() != nil {
		context.AfterFunc(ctx, func() { n.remove(ch) })
	}
	return ch
}

func (n *Notifier) remove(ch chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.subs[ch]; ok {
		delete(n.subs, ch)
		close(ch)
	}
}

// Notify signals every watcher.
func (n *Notifier) Notify() {
	n.mu.Lock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	n.mu.Unlock()
}

// Close closes every watcher's channel; later Subscribes get a closed one.
func (n *Notifier) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for ch := range n.subs {
		close(ch)
	}
	n.subs = nil
}
