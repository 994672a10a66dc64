package mqtt

import (
	"sync"

	"github.com/tidemark-io/tidemark/table"
)

// maxLazyEnds bounds the exchange endings a connection holds back (see
// Broker.maxLazy); past it an ending commits with the read loop's next
// group as before.
const maxLazyEnds = 256

// lazyEnds holds the store writes that end outbound QoS 2 exchanges (the
// delete of the in-flight record and the completion mark) until a commit
// that happens anyway takes them: the read loop's next group, or the
// session's next checkpoint. Nothing waits for these writes. Losing them
// in a crash leaves a record whose PUBCOMP already came: on resume the
// broker sends that PUBREL again and the client answers PUBCOMP, which is
// what the protocol provides for [MQTT-4.3.3, 4.4]; nothing is delivered
// twice. Until an ending is committed its packet id is not reused (see
// outbound.ending), so its delete can never hit a newer exchange's record.
type lazyEnds struct {
	mu   sync.Mutex
	ends []lazyEnd
}

// lazyEnd is one held-back exchange ending.
type lazyEnd struct {
	pi  uint16
	pos table.Cursor
}

// add holds back the ending of the exchange on pi at log position pos;
// false when limit endings are held already.
func (l *lazyEnds) add(pi uint16, pos table.Cursor, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ends) >= limit {
		return false
	}
	l.ends = append(l.ends, lazyEnd{pi: pi, pos: pos})
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

// endWrite writes the end of the outbound QoS 2 exchange on pi at log
// position pos into tx: its record goes, a completion mark above the
// checkpoint comes.
func (c *conn) endWrite(tx *table.Tx, pi uint16, pos table.Cursor) error {
	if err := tx.DeleteStateUnchecked(tableOut, slotID(c.client, pi)); err != nil {
		return err
	}
	return tx.PutStateUnchecked(tableDone, c.client+slotSep+pos.String(), nil)
}

// writeLazy adds the held-back endings to tx and returns them, for ended
// once tx committed.
func (c *conn) writeLazy(tx *table.Tx) ([]lazyEnd, error) {
	ends := c.lazy.take()
	for _, e := range ends {
		if err := c.endWrite(tx, e.pi, e.pos); err != nil {
			return nil, err
		}
	}
	return ends, nil
}

// ended frees the packet ids of endings that are committed.
func (o *outbound) ended(ends []lazyEnd) {
	if len(ends) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range ends {
		delete(o.ending, e.pi)
	}
}
