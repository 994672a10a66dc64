package mqtt

import (
	"github.com/tidemark-io/tidemark/table"
)

// The stored form of a session's outbound QoS 2 exchanges: one record in
// tableOut per exchange, written before its PUBLISH and again after its
// PUBREC, so a reconnect or restart resumes it where it stood.

// outRecord is the stored form of an outbound QoS 2 message in flight.
type outRecord struct {
	PI    uint16       `json:"pi"`
	State byte         `json:"state"`
	Pos   table.Cursor `json:"pos"`
	Msg   []byte       `json:"msg"`
}

// addRecord writes om's outbound record into the sender's pending group.
func (o *outbound) addRecord(om *outMsg) error {
	enc, err := om.msg.MarshalBinary()
	if err != nil {
		return err
	}
	v := (&outRecord{PI: om.pi, State: om.state, Pos: om.pos, Msg: enc}).encode()
	if o.grp.tx == nil {
		o.grp.tx = o.c.b.db.Begin()
	}
	om.rec = true
	return o.grp.tx.PutStateUnchecked(tableOut, slotID(o.c.client, om.pi), v)
}
