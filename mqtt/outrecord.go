package mqtt

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// A session's outbound QoS 2 exchanges in the store: one record
// (session.OutRecord) in tableOut per exchange, written before its
// PUBLISH and again after its PUBREC, so a reconnect or restart resumes it
// where it stood.

// addRecord writes om's outbound record into the sender's pending group.
func (o *outbound) addRecord(om *outMsg) error {
	enc, err := om.msg.MarshalBinary()
	if err != nil {
		return err
	}
	v := (&session.OutRecord{PI: om.pi, State: om.state, Pos: om.pos, Msg: enc}).Encode()
	if o.grp.tx == nil {
		o.grp.tx = o.c.b.db.Begin()
	}
	om.rec = true
	return o.grp.tx.PutStateUnchecked(tableOut, slotID(o.c.client, om.pi), v)
}

// restoreRecords puts the session's stored QoS 2 exchanges (the values
// of its tableOut records, see loadRows) back into the in-flight window,
// each awaiting its log event (resumed); undecodable records are passed
// over. Run by newOutbound before the sender starts.
func (o *outbound) restoreRecords(recs [][]byte) {
	for _, v := range recs {
		var or session.OutRecord
		if or.Decode(v) != nil {
			continue
		}
		var m Message
		if m.UnmarshalBinary(or.Msg) != nil {
			continue
		}
		om := &outMsg{pi: or.PI, qos: 2, pos: or.Pos, msg: &m, rec: true, state: or.State}
		o.track(om)
		if o.resumed == nil {
			o.resumed = map[table.Cursor]*outMsg{}
		}
		o.resumed[or.Pos] = om
	}
}
