// Package group is the group-commit queue the engines with a writer of
// their own share (badger, jetstream, lmdb): submitters put commits in, one
// writer goroutine takes them out in groups it commits together, so many
// commits share one sync or one server round trip.
//
// What differs between engines is a parameter: how long the writer waits
// for stragglers before it commits a group (Rule; lmdb waits for none),
// what fits one group (the fits function of Next), and whether commits
// marked driver.Batch.Defer hold a group open (Options.Linger). Everything else
// is here once: submission order, back-pressure, the wake-up of the
// writer, the count of submitters coming back after a group, and the end
// of the queue on Close.
package group

import (
	"context"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// Rule is a gather rule: after taking the commits waiting, the writer
// may wait for more before it commits the group. Splitting one wave of
// submitters over two groups costs a second sync (or server round trip),
// so waiting a little for the rest of a wave pays; waiting when nobody
// comes is the price.
type Rule struct {
	// Wait returns how long the writer waits for the group to reach the
	// size of the previous group, given that group's size and how long
	// committing it took; zero or a nil Wait means no wait.
	Wait func(last int, took time.Duration) time.Duration
	// Returned counts, towards the previous group's size, only the
	// commits submitted after that group completed (its submitters
	// coming back); otherwise every commit taken counts.
	Returned bool
	// FromDone starts the wait when the previous group completed rather
	// than when the group's first commit was taken.
	FromDone bool
}

// Options configures a Queue.
type Options[T any] struct {
	// Limit bounds the commits waiting; Put waits for room beyond it
	// (back-pressure). Zero means no bound.
	Limit int
	// MaxGroup bounds the commits of one group; zero means no bound.
	MaxGroup int
	// Rule is the gather rule.
	Rule Rule
	// Linger is how long a group whose commits are all deferred (Deferred
	// says which are) waits for one that is not, whose sync they then
	// share (see engine/internal/deferral). Zero holds no group open.
	Linger time.Duration
	// Deferred reports whether a commit was deferred; needed with Linger.
	Deferred func(T) bool
}

// Queue is a group-commit queue of commits of type T, for any number of
// submitters and one writer. Commits leave it in the order they were put.
type Queue[T any] struct {
	opts Options[T]

	mu     sync.Mutex
	items  []entry[T]
	closed bool
	room   chan struct{} // closed when the writer takes commits, if someone waits for room
	wake   chan struct{} // holds a signal while commits wait for the writer

	gen uint64 // under mu: times the writer advanced (see Advance)

	// Writer only.
	last   int           // size of the previous group
	took   time.Duration // time the previous group took
	doneAt time.Time     // when the previous group completed
}

type entry[T any] struct {
	v   T
	gen uint64 // groups completed when it was put
}

// New returns an empty queue.
func New[T any](opts Options[T]) *Queue[T] {
	return &Queue[T]{opts: opts, wake: make(chan struct{}, 1)}
}

// Put adds v behind every commit put before it. While the queue holds
// Limit commits it waits for room, and gives up with ctx's error when ctx
// ends first. After Close, or when Close is called while it waits, it
// returns an error wrapping driver.ErrClosed. On error v is not queued.
func (q *Queue[T]) Put(ctx context.Context, v T) error {
	q.mu.Lock()
	for q.opts.Limit > 0 && len(q.items) >= q.opts.Limit && !q.closed {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	if q.closed {
		q.mu.Unlock()
		return driver.ErrClosed
	}
	// gen is advanced under mu (Advance), so a commit put after the
	// writer advanced it counts as returned.
	q.items = append(q.items, entry[T]{v: v, gen: q.gen})
	q.mu.Unlock()
	q.signal()
	return nil
}

func (q *Queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close ends the queue: later Puts are refused, and Next returns the
// commits still queued and then nil.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	q.closed = true
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	q.mu.Unlock()
	q.signal()
}

// Advance tells the queue that the writer made commits durable and is
// about to complete their handles: commits put from now on count as
// returned (Rule.Returned). A writer that commits a group in several
// transactions calls it after each.
func (q *Queue[T]) Advance() {
	q.mu.Lock()
	q.gen++
	q.mu.Unlock()
}

// Done tells the queue that the writer completed the previous group, of
// n commits, and how long committing it took: the gather rule's measure.
func (q *Queue[T]) Done(n int, took time.Duration) {
	q.last, q.took, q.doneAt = n, took, time.Now()
}

// Next waits for commits and returns the next group in buf (emptied
// first): the longest run of waiting commits that fits (fits is asked
// about each, first says whether it would open the group; a commit that
// opens a group always goes, and one that does not fit waits for the
// next group), grown as the gather rule and the linger allow. It returns
// nil once the queue is closed and empty. Writer only.
func (q *Queue[T]) Next(buf []T, fits func(first bool, v T) bool) []T {
	for {
		group, open := q.TryNext(buf, fits)
		if group != nil || !open {
			return group
		}
		<-q.wake
	}
}

// TryNext is Next without the wait for a first commit, for a writer
// that waits on other events too (see Ready): with no commit waiting it
// returns nil and whether the queue is still open. Writer only.
func (q *Queue[T]) TryNext(buf []T, fits func(first bool, v T) bool) (group []T, open bool) {
	b := builder[T]{q: q, group: buf[:0], fits: fits}
	switch n := b.take(); {
	case n < 0:
		return nil, false
	case n == 0:
		return nil, true
	}
	b.gather()
	b.linger()
	return b.group, true
}

// Ready receives a signal when commits may be waiting or the queue
// closed: a writer that also waits on other events selects on it, then
// calls TryNext. Writer only.
func (q *Queue[T]) Ready() <-chan struct{} { return q.wake }

// builder is one group on its way out of the queue.
type builder[T any] struct {
	q        *Queue[T]
	group    []T
	fits     func(first bool, v T) bool
	full     bool // a commit did not fit: the group goes as it is
	returned int  // commits of the group put after the previous group completed
}

// take moves the waiting commits that fit into the group and reports how
// many; after Close with nothing waiting it reports -1.
func (b *builder[T]) take() int {
	q := b.q
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(q.items) {
		if q.opts.MaxGroup > 0 && len(b.group) >= q.opts.MaxGroup {
			b.full = true
			break
		}
		e := q.items[n]
		if !b.fits(len(b.group) == 0, e.v) {
			b.full = true
			break
		}
		b.group = append(b.group, e.v)
		if e.gen == q.gen {
			b.returned++
		}
		n++
	}
	if n > 0 {
		m := copy(q.items, q.items[n:])
		clear(q.items[m:])
		q.items = q.items[:m]
		if q.room != nil {
			close(q.room)
			q.room = nil
		}
	}
	if len(q.items) > 0 {
		q.signal() // what is left opens the next group
	}
	if n == 0 && q.closed && len(q.items) == 0 {
		return -1
	}
	return n
}

// gather waits, as the rule says, for the group to reach the previous
// group's size.
func (b *builder[T]) gather() {
	q := b.q
	r := q.opts.Rule
	if r.Wait == nil || q.last == 0 || b.full || b.count() >= q.last {
		return
	}
	wait := r.Wait(q.last, q.took)
	if wait <= 0 {
		return
	}
	start := time.Now()
	if r.FromDone {
		start = q.doneAt
	}
	left := time.Until(start.Add(wait))
	if left <= 0 {
		return
	}
	b.takeUntil(left, func() bool { return b.full || b.count() >= q.last })
}

// takeUntil takes commits into the group as they arrive until enough
// holds, d passed, or the queue closed with nothing left.
func (b *builder[T]) takeUntil(d time.Duration, enough func() bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for !enough() {
		select {
		case <-b.q.wake:
			if b.take() < 0 {
				return
			}
		case <-timer.C:
			return
		}
	}
}

// count is the group's size as the gather rule counts it.
func (b *builder[T]) count() int {
	if b.q.opts.Rule.Returned {
		return b.returned
	}
	return len(b.group)
}

// linger holds a group whose commits are all deferred open for a commit
// that is not, at most Linger.
func (b *builder[T]) linger() {
	q := b.q
	if q.opts.Linger <= 0 || b.full || !b.allDeferred(0) {
		return
	}
	seen := len(b.group) // the commits before it are all deferred
	b.takeUntil(q.opts.Linger, func() bool {
		if b.full || !b.allDeferred(seen) {
			return true
		}
		seen = len(b.group)
		return false
	})
}

func (b *builder[T]) allDeferred(from int) bool {
	for _, v := range b.group[from:] {
		if !b.q.opts.Deferred(v) {
			return false
		}
	}
	return true
}
