package delivery

import (
	"sync"

	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// MaxLazyEnds bounds the exchange endings a session holds back (the
// broker may set a lower Env.MaxLazy); past it an ending commits with the
// connection's next group.
const MaxLazyEnds = 256

// lazyEnds holds the store writes that end outbound QoS 2 exchanges (the
// delete of the in-flight record, and a completion mark when the
// checkpoint does not cover the exchange) until a commit that happens
// anyway takes them: the session's next checkpoint, or, once half of
// Env.MaxLazy are held, the read loop's next group. The checkpoint goes
// first because it needs no marks: an exchange at or below the checkpoint
// written in the same commit is one a resume never sends again, so its
// ending is the record's delete alone, where a group writes a mark and a
// later checkpoint deletes it (two writes of the store saved for every
// QoS 2 delivery that completes in order). Once a quarter of Env.MaxLazy
// are held, the goroutine that ends the next exchange writes the
// checkpoint. Nothing waits for these writes. Losing them
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
	pos  logpos.Pos
}

// add holds back the ending of the exchange on pi (its record slot) at
// log position pos and returns how many are held; zero when limit endings
// are held already.
func (l *lazyEnds) add(pi uint16, slot string, pos logpos.Pos, limit int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ends) >= limit {
		return 0
	}
	l.ends = append(l.ends, lazyEnd{pi: pi, slot: slot, pos: pos})
	return len(l.ends)
}

// take removes and returns the endings held back.
func (l *lazyEnds) take() []lazyEnd {
	l.mu.Lock()
	defer l.mu.Unlock()
	ends := l.ends
	l.ends = nil
	return ends
}

// held reports how many endings are held back.
func (l *lazyEnds) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ends)
}

// pending reports whether any ending is held back.
func (l *lazyEnds) pending() bool { return l.held() > 0 }

// persistAt is how many held endings make the exchange that ends next
// write the session's checkpoint, and groupAt how many make the read
// loop's next group take them, for a limit of limit (see lazyEnds).
func persistAt(limit int) int { return max(1, limit/4) }
func groupAt(limit int) int   { return max(1, limit/2) }

// endWrite writes the end of the outbound QoS 2 exchange whose record is
// slot, at log position pos, into tx: its record goes and, with mark (the
// exchange is above the checkpoint tx writes, or tx writes none), a
// completion mark comes.
func (o *Session) endWrite(tx *table.Tx, slot string, pos logpos.Pos, mark bool) error {
	if err := tx.DeleteStateUnchecked(session.OutTable, slot); err != nil || !mark {
		return err
	}
	return tx.PutStateUnchecked(session.DoneTable, session.DoneID(o.client, pos), nil)
}

// writeLazy adds the held-back endings to tx and returns them, for ended
// once tx committed. cp, when set, is the checkpoint tx writes: an ending
// at or below it is the record's delete alone, and its completion mark
// leaves memory too (the checkpoint covers it, as sweepDoneLocked has it).
func (o *Session) writeLazy(tx *table.Tx, cp *logpos.Vec) ([]lazyEnd, error) {
	ends := o.lazy.take()
	covered := 0
	for _, e := range ends {
		mark := cp == nil || !cp.Covers(e.pos)
		if !mark {
			covered++
		}
		if err := o.endWrite(tx, e.slot, e.pos, mark); err != nil {
			return nil, err
		}
	}
	if covered > 0 {
		o.mu.Lock()
		for _, e := range ends {
			if cp.Covers(e.pos) {
				delete(o.done, e.pos)
			}
		}
		o.mu.Unlock()
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

// LazyDue reports whether enough exchange endings are held back for the
// connection's next commit to take them, rather than the session's
// checkpoint (see lazyEnds).
func (o *Session) LazyDue() bool { return o.lazy.held() >= groupAt(o.env.MaxLazy) }

// WriteLazy adds the exchange endings held back to tx, the connection's
// next commit; then, nil when there were none, must run once tx has
// committed.
func (o *Session) WriteLazy(tx *table.Tx) (then func(), err error) {
	ends, err := o.writeLazy(tx, nil)
	if err != nil || len(ends) == 0 {
		return nil, err
	}
	return func() { o.ended(ends) }, nil
}
