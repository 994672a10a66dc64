package driver

import (
	"context"
	"sync/atomic"
)

// Handle is the completion of one submitted commit. It completes exactly
// once, with the commit's Result or its error.
type Handle struct {
	done chan struct{}
	res  Result
	err  error
	set  atomic.Bool
	keys [2]LogKey // res.Keys of a CompletedLog handle, when they fit
}

// NewHandle returns a pending handle and the function that completes it.
// Only the first call of complete counts. Backends call it; nothing else
// should.
func NewHandle() (*Handle, func(Result, error)) {
	h := &Handle{done: make(chan struct{})}
	return h, h.complete
}

// closedDone is the Done channel of every handle created complete: most
// commits at SyncNone and every refused batch complete inside Submit, and
// a channel made only to be closed at once is an allocation per commit.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Completed returns a handle that is already complete.
func Completed(res Result, err error) *Handle {
	h := &Handle{done: closedDone, res: res, err: err}
	h.set.Store(true)
	return h
}

// CompletedLog returns a handle already complete without error, whose
// Result holds n log keys, all k (the form of engines whose commits share
// one log key), in one allocation with the handle. With n == 0 it
// allocates nothing: all such handles are one value, which completion
// never writes to.
func CompletedLog(k LogKey, n int) *Handle {
	if n == 0 {
		return completedEmpty
	}
	h := &Handle{done: closedDone}
	if n <= len(h.keys) {
		h.res.Keys = h.keys[:n:n]
	} else {
		h.res.Keys = make([]LogKey, n)
	}
	for i := range h.res.Keys {
		h.res.Keys[i] = k
	}
	h.set.Store(true)
	return h
}

// completedEmpty is every complete handle of a commit without log
// entries or error.
var completedEmpty = Completed(Result{}, nil)

func (h *Handle) complete(res Result, err error) {
	if !h.set.CompareAndSwap(false, true) {
		return
	}
	h.res, h.err = res, err
	close(h.done)
}

// Done is closed when the commit completed.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Result returns the outcome; valid only after Done is closed.
func (h *Handle) Result() (Result, error) {
	<-h.done
	return h.res, h.err
}

// Err returns the commit's error; valid only after Done is closed.
func (h *Handle) Err() error {
	<-h.done
	return h.err
}

// Wait blocks until the commit completes or ctx ends. A ctx error does not
// mean the commit failed: it may still complete.
func (h *Handle) Wait(ctx context.Context) (Result, error) {
	select {
	case <-h.done:
		return h.res, h.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}
