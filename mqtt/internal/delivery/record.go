package delivery

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// A session's outbound QoS 2 exchanges in the store: one record
// (session.OutRecord) in session.OutTable per exchange, written before its
// PUBLISH and again after its PUBREC, so a reconnect or restart resumes it
// where it stood. Once PUBREC came, what is owed the client is a PUBREL,
// which needs no payload: that write keeps the message without it.

// addRecord writes om's outbound record into the sender's pending group.
func (o *Session) addRecord(om *outMsg) error {
	v, err := outRecord(om, om.state)
	if err != nil {
		return err
	}
	if o.grp.tx == nil {
		o.grp.tx = o.env.DB.Begin()
	}
	om.rec, om.slot = true, session.SlotID(o.client, om.pi)
	o.wroteRows.Store(true)
	return o.grp.tx.PutStateUnchecked(session.OutTable, om.slot, v)
}

// outRecord returns om's outbound record in state: its header and message
// encoded into one array. In outPubrec the message goes without its
// payload: a resumed exchange in that state sends only a PUBREL (see
// Start), and a version that reads such a record still finds a message.
func outRecord(om *outMsg, state byte) ([]byte, error) {
	m := om.msg
	if state == outPubrec && len(m.Payload) > 0 {
		bare := *m
		bare.Payload = nil
		m = &bare
	}
	b := session.AppendOutHeader(make([]byte, 0, session.OutHeaderMax+m.BinarySize()), om.pi, state, om.pos)
	return m.AppendBinary(b)
}

// restoreRecords puts the session's stored QoS 2 exchanges (the values
// of its session.OutTable records, see Restored) back into the in-flight window,
// each awaiting its log event (resumed); undecodable records are passed
// over. Run by New before the sender starts.
func (o *Session) restoreRecords(recs [][]byte) {
	for _, v := range recs {
		var or session.OutRecord
		if or.Decode(v) != nil {
			continue
		}
		var m message.Message
		if m.UnmarshalBinary(or.Msg) != nil {
			continue
		}
		om := &outMsg{o: o, pi: or.PI, qos: 2, pos: or.Pos, msg: &m, rec: true, state: or.State, slot: session.SlotID(o.client, or.PI)}
		o.track(om)
		if o.resumed == nil {
			o.resumed = map[table.Cursor]*outMsg{}
		}
		o.resumed[or.Pos] = om
	}
}
