package delivery

import (
	"sync"

	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// MaxLazyEnds bounds the exchange endings a session holds back (the
// broker may set a lower Env.MaxLazy); past it an ending commits with the
// connection's next group.
const MaxLazyEnds = 256

// lazyEnds holds the store writes that end outbound QoS 2 exchanges (the
// delete of the in-flight record and the completion mark) until a commit
// that happens anyway takes them: the read loop's next group, or the
// session's next checkpoint. Nothing waits for these writes. Losing them
// in a crash leaves a record whose PUBCOMP already came: on resume the
// broker sends that PUBREL again and the client answers PUBCOMP, which is
// what the protocol provides for [MQTT-4.3.3, 4.4]; nothing is delivered
// twice. Until an ending is committed its packet id is not reused (see
// Session.ending), so its delete can never hit a newer exchange's record.
type lazyEnds struct {
	mu   sync.Mutex
	ends []lazyEnd
}

// lazyEnd is one held-back exchange ending.
type lazyEnd struct {
	pi   uint16
	slot string // the exchange's record id
	pos  table.Cursor
}

// add holds back the ending of the exchange on pi (its record slot) at
// log position pos; false when limit endings are held already.
func (l *lazyEnds) add(pi uint16, slot string, pos table.Cursor, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ends) >= limit {
		return false
	}
	l.ends = append(l.ends, lazyEnd{pi: pi, slot: slot, pos: pos})
	return true
}

// take removes and returns the endings held back.
func (l *lazyEnds) take() []lazyEnd {
	l.mu.Lock()
	defer l.mu.Unlock()
	ends := l.ends
	l.ends = nil
	return ends
}

// pending reports whether any ending is held back.
func (l *lazyEnds) pending() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ends) > 0
}

// endWrite writes the end of the outbound QoS 2 exchange whose record is
// slot, at log position pos, into tx: its record goes, a completion mark
// above the checkpoint comes.
func (o *Session) endWrite(tx *table.Tx, slot string, pos table.Cursor) error {
	if err := tx.DeleteStateUnchecked(session.OutTable, slot); err != nil {
		return err
	}
	return tx.PutStateUnchecked(session.DoneTable, session.DoneID(o.client, pos), nil)
}

// writeLazy adds the held-back endings to tx and returns them, for ended
// once tx committed.
func (o *Session) writeLazy(tx *table.Tx) ([]lazyEnd, error) {
	ends := o.lazy.take()
	for _, e := range ends {
		if err := o.endWrite(tx, e.slot, e.pos); err != nil {
			return nil, err
		}
	}
	return ends, nil
}

// ended frees the packet ids of endings that are committed.
func (o *Session) ended(ends []lazyEnd) {
	if len(ends) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range ends {
		delete(o.ending, e.pi)
	}
}

// LazyPending reports whether exchange endings are held back for a
// commit that comes anyway (see lazyEnds).
func (o *Session) LazyPending() bool { return o.lazy.pending() }

// WriteLazy adds the exchange endings held back to tx, the connection's
// next commit; then, nil when there were none, must run once tx has
// committed.
func (o *Session) WriteLazy(tx *table.Tx) (then func(), err error) {
	ends, err := o.writeLazy(tx)
	if err != nil || len(ends) == 0 {
		return nil, err
	}
	return func() { o.ended(ends) }, nil
}
