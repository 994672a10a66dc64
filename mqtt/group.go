package mqtt

import (
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// maxGroup bounds the packets whose writes share one commit.
const maxGroup = 256

// group is the read loop's pending commit: the writes without
// preconditions of consecutive packets that arrived together (QoS 1
// messages, outbound QoS 2 state), with the acknowledgements that wait for
// them. One commit instead of one per packet keeps the store's per-commit
// cost off each message when a client pipelines.
//
// The read loop submits the group before it would wait for the next
// packet, before any other commit or acknowledgement of its own (so
// commits and acknowledgements keep packet order), and when it is full.
// Writes with preconditions (QoS 2 staging and release, session records)
// are never grouped: one failed check must not fail its neighbours.
type group struct {
	tx      *table.Tx
	entries []ackEntry
}

// later adds write to the pending group and queues e for when the group's
// commit completes. Read loop only. False means the connection is ending.
func (c *conn) later(write func(tx *table.Tx) error, e ackEntry) bool {
	if c.grp.tx == nil {
		c.grp.tx = c.b.db.Begin()
	}
	if err := write(c.grp.tx); err != nil {
		c.disconnect(packet.UnspecifiedError, err.Error())
		return false
	}
	c.grp.entries = append(c.grp.entries, e)
	if len(c.grp.entries) >= c.b.group {
		return c.flushGroup()
	}
	return true
}

// flushGroup submits the pending group and queues its acknowledgements.
// Read loop only.
func (c *conn) flushGroup() bool {
	if c.grp.tx == nil {
		return true
	}
	tx, entries := c.grp.tx, c.grp.entries
	c.grp.tx, c.grp.entries = nil, c.grp.entries[:0]
	h, err := c.submitNow(tx)
	if err != nil {
		return false
	}
	for _, e := range entries {
		e.h = h
		if !c.push(e) {
			return false
		}
	}
	return true
}

// ack queues an acknowledgement of the read loop behind the pending
// group's. Read loop only.
func (c *conn) ack(e ackEntry) bool {
	if !c.flushGroup() {
		return false
	}
	return c.push(e)
}

// submit starts a commit of the read loop after the pending group's.
// Read loop only.
func (c *conn) submit(tx *table.Tx) (*engine.Handle, error) {
	if !c.flushGroup() {
		return nil, errGroupFailed
	}
	return c.submitNow(tx)
}

// packetReady reports whether a whole packet waits in the read buffer, so
// reading it will not block.
func (c *conn) packetReady() bool {
	n := c.br.Buffered()
	if n < 2 {
		return false
	}
	head, _ := c.br.Peek(min(n, 5))
	size, mult := 0, 1
	for i := 1; i < len(head); i++ {
		size += int(head[i]&0x7f) * mult
		if head[i]&0x80 == 0 {
			return i+1+size <= n
		}
		mult <<= 7
	}
	return false
}
