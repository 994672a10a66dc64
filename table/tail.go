package table

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// tail is the DB's one follower of the engine's log. It reads each new
// entry once, decodes it, and keeps the most recent window of entries in
// memory; every subscription and follower that has caught up reads from
// that window instead of scanning the engine, so a thousand live
// subscribers cost one log scan, not a thousand.
//
// The window is contiguous: it holds every entry after floor up to head,
// in log order. A reader positioned at or after floor therefore finds all
// entries after its position in the window, which is what makes the
// switch from replay to live free of gaps and duplicates: there is no
// listener to register and no side buffer to reconcile, only one ordered
// sequence read from two places.
type tail struct {
	db       *DB
	window   int // entries kept
	maxBytes int // value bytes kept

	mu      sync.RWMutex
	entries []*logEntry
	bytes   int // value bytes of entries
	floor   pos // position just before entries[0]
	head    pos // position of the last entry read
	changed chan struct{}
	// changedTaken says after handed changed out since it was made.
	changedTaken atomic.Bool
	dead         bool

	// readMu is held by whoever reads the engine's log into the window:
	// the tail's goroutine after a watch signal, or a committer pumping
	// (see pump). pumpAsked is set by a pump that found it held, so the
	// holder reads once more before it lets go.
	readMu    sync.Mutex
	pumpAsked atomic.Bool
	// followers are called, in the reading goroutine, after each batch
	// it published (see DB.Pump); under readMu, as is scan.
	followers []*func()
	scan      *logScan

	stopped chan struct{}
}

func newTail(db *DB, head pos, window, maxBytes int) *tail {
	return &tail{db: db, window: window, maxBytes: maxBytes, floor: head, head: head, changed: make(chan struct{}), stopped: make(chan struct{}), scan: newLogScan()}
}

func (t *tail) isDead() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.dead
}

func (t *tail) headPos() pos {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.head
}

// after returns up to max window entries after p. covered is false when
// the window does not reach back to p (or the tail stopped): the reader
// must scan the engine. changed is closed when new entries arrive; wait
// says the caller may wait on it when the batch is empty, and only then
// is it handed out (see wakeLocked): a reader that has entries to handle,
// or never waits, costs no channel per commit.
func (t *tail) after(p pos, max int, wait bool) (batch []*logEntry, covered bool, changed <-chan struct{}) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.dead || p.less(t.floor) {
		batch, covered = nil, false
	} else {
		i := sort.Search(len(t.entries), func(i int) bool { return p.less(t.entries[i].pos) })
		j := min(len(t.entries), i+max)
		// Entries are appended past len and the slice is replaced when
		// trimmed, so this sub-slice is never written again.
		batch, covered = t.entries[i:j:j], true
	}
	if !wait {
		return batch, covered, nil
	}
	if len(batch) == 0 {
		// Under the read lock: the writers, which replace changed,
		// hold the write lock.
		t.changedTaken.Store(true)
	}
	return batch, covered, t.changed
}

// wakeLocked closes changed, if a reader took it, and puts a new one in
// its place: a tail that no reader waits on (one commit at a time, with
// the readers all caught up or none live) makes no channel per commit.
// mu held for writing.
func (t *tail) wakeLocked() {
	if t.changedTaken.Load() {
		close(t.changed)
		t.changed = make(chan struct{})
		t.changedTaken.Store(false)
	}
}

func (t *tail) publish(batch []*logEntry) {
	if len(batch) == 0 {
		return
	}
	t.mu.Lock()
	t.entries = append(t.entries, batch...)
	for _, e := range batch {
		t.bytes += len(e.value)
	}
	t.head = batch[len(batch)-1].pos
	if batch[len(batch)-1].last() {
		t.head.idx = wholeKey
	}
	// Trim in bulk once a bound is exceeded twice over, so trimming is
	// amortized and a trimmed slice is never written again.
	if n := len(t.entries); n > 2*t.window || t.bytes > 2*t.maxBytes {
		drop, bytes := 0, t.bytes
		for drop < n-1 && (n-drop > t.window || bytes > t.maxBytes) {
			bytes -= len(t.entries[drop].value)
			drop++
		}
		if drop > 0 {
			t.floor = t.entries[drop-1].pos
			t.entries = append(make([]*logEntry, 0, 2*(n-drop)), t.entries[drop:]...)
			t.bytes = bytes
		}
	}
	t.wakeLocked()
	t.mu.Unlock()
}

// reset empties the window at p, after the log was truncated past the
// tail: readers before p then scan and see the truncation themselves.
func (t *tail) reset(p pos) {
	t.mu.Lock()
	t.entries, t.bytes = nil, 0
	t.floor, t.head = p, p
	t.wakeLocked()
	t.mu.Unlock()
}

// trim drops the window's entries below key below after the log was
// truncated there, so a reader positioned below the truncation finds its
// position uncovered, scans the engine and gets ErrHistoryUnavailable
// instead of being served entries the log no longer has.
func (t *tail) trim(below engine.LogKey) {
	if below == 0 {
		return
	}
	cut := pos{key: below - 1, idx: wholeKey}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.floor.less(cut) {
		return
	}
	i := sort.Search(len(t.entries), func(i int) bool { return cut.less(t.entries[i].pos) })
	t.entries = append([]*logEntry(nil), t.entries[i:]...)
	t.floor = cut
	if t.head.less(cut) {
		t.head = cut
	}
}

func (t *tail) stop() {
	t.mu.Lock()
	t.dead = true
	t.wakeLocked()
	t.mu.Unlock()
}

func (t *tail) run(ctx context.Context) {
	defer close(t.stopped)
	defer t.stop()
	watch := t.db.e.Watch(ctx)
	backoff := 10 * time.Millisecond
	for {
		err := t.readAll(ctx)
		switch {
		case err == nil:
			backoff = 10 * time.Millisecond
		case ctx.Err() != nil || errors.Is(err, engine.ErrClosed):
			return
		case errors.Is(err, engine.ErrLogTruncated):
			st, serr := t.db.e.LogStats(ctx)
			if serr == nil {
				t.db.log.Warn("log truncated past the live tail; readers behind it will fail", "floor", st.Floor)
				t.reset(pos{key: st.Floor, idx: wholeKey})
				continue
			}
			err = serr
			fallthrough
		default:
			t.db.log.Error("reading the change log failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		select {
		case _, ok := <-watch:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// readAll reads every entry after head and publishes it in batches,
// holding readMu. A short batch ends it without a scan that would find
// nothing: a commit that landed meanwhile has signalled the watch, so run
// scans again.
func (t *tail) readAll(ctx context.Context) error {
	t.readMu.Lock()
	defer t.readMu.Unlock()
	return t.readAllLocked(ctx)
}

func (t *tail) readAllLocked(ctx context.Context) error {
	const page = 512
	for {
		batch, err := t.scan.from(ctx, t.db.e, t.headPos(), page)
		if err != nil {
			return err
		}
		t.publish(batch)
		if len(batch) > 0 {
			for _, f := range t.followers {
				(*f)()
			}
		}
		if len(batch) < page {
			return nil
		}
	}
}

// pump reads the log into the window in the calling goroutine, unless
// another goroutine is reading it, which then reads once more before it
// stops: either way what was committed before the call is read without
// waiting for the tail's goroutine to be woken. Errors are left to that
// goroutine, which the engine's watch wakes all the same.
func (t *tail) pump(ctx context.Context) {
	t.pumpAsked.Store(true)
	for t.pumpAsked.Load() && t.readMu.TryLock() {
		t.pumpAsked.Store(false)
		err := t.readAllLocked(ctx)
		t.readMu.Unlock()
		if err != nil {
			return
		}
	}
}

// follow registers f to be called after each batch the tail publishes,
// until the returned function is called. Neither may be called from f.
func (t *tail) follow(f func()) (unfollow func()) {
	key := &f
	t.readMu.Lock()
	t.followers = append(t.followers, key)
	t.readMu.Unlock()
	return func() {
		t.readMu.Lock()
		t.followers = slices.DeleteFunc(t.followers, func(g *func()) bool { return g == key })
		t.readMu.Unlock()
	}
}

// scanFrom reads up to max entries after p from the engine's log.
func scanFrom(ctx context.Context, e engine.Engine, p pos, max int) ([]*logEntry, error) {
	return newLogScan().from(ctx, e, p, max)
}

// logScan reads log entries for one goroutine at a time, reusing what a
// scan needs: the tail scans the log after every commit, usually for one
// entry, and should allocate for that entry alone. Entries come from a
// slab of logSlab, and a table name equal to the last one decoded is
// shared rather than copied.
type logScan struct {
	batch []*logEntry
	slab  []logEntry
	table string
	// The current scan's bounds, read by add, which is made once.
	p         pos
	exclusive bool
	max       int
	add       func(engine.Entry) bool
}

// logSlab is how many entries one allocation holds. An entry kept (in the
// window, by a slow reader) keeps its slab, so it stays small.
const logSlab = 16

func newLogScan() *logScan {
	s := &logScan{}
	s.add = func(en engine.Entry) bool {
		if !s.exclusive && en.Key == s.p.key && en.Index <= s.p.idx {
			return true
		}
		if len(s.slab) == 0 {
			s.slab = make([]logEntry, logSlab)
		}
		e := &s.slab[0]
		s.slab = s.slab[1:]
		decodeEntryInto(e, en, s.table)
		s.table = e.table
		s.batch = append(s.batch, e)
		return len(s.batch) < s.max
	}
	return s
}

// from reads up to max entries after p. The batch it returns is valid
// until the next call; the entries in it are the caller's.
func (s *logScan) from(ctx context.Context, e engine.Engine, p pos, max int) ([]*logEntry, error) {
	clear(s.batch)
	s.batch = s.batch[:0]
	s.p, s.exclusive, s.max = p, p.idx == wholeKey, max
	err := e.ScanLog(ctx, p.key, s.exclusive, s.add)
	return s.batch, err
}
