package delivery

import (
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
)

// A session's outbound QoS 2 exchanges in the store: one record
// (session.OutRecord) in session.OutTable per exchange, written before its
// PUBLISH and again after its PUBREC, so a reconnect or restart resumes it
// where it stood. Once PUBREC came, what is owed the client is a PUBREL,
// which needs no payload: that write keeps the message without it.

// addRecord writes om's outbound record, as its PUBLISH is sent, into the
// sender's pending group.
func (o *Session) addRecord(om *outMsg) error {
	if o.grp.tx == nil {
		o.grp.tx = o.db.Begin()
	}
	om.rec, om.slot = true, session.SlotID(o.client, om.pi)
	o.wroteRows.Store(true)
	return o.grp.tx.PutStateUncheckedFrom(session.OutTable, om.slot, (*sentRecord)(om))
}

// sentRecord is an exchange's record as its PUBLISH is sent, encoded by
// the commit that writes it (a table.ValueAppender).
type sentRecord outMsg

func (r *sentRecord) ValueSize() int { return outRecordSize((*outMsg)(r), outSent) }
func (r *sentRecord) AppendValue(b []byte) []byte {
	return appendOutRecord(b, (*outMsg)(r), outSent)
}

// pubrecRecord is an exchange's record once its PUBREC came, encoded by
// the commit that writes it (a table.ValueAppender).
type pubrecRecord outMsg

func (r *pubrecRecord) ValueSize() int { return outRecordSize((*outMsg)(r), outPubrec) }
func (r *pubrecRecord) AppendValue(b []byte) []byte {
	return appendOutRecord(b, (*outMsg)(r), outPubrec)
}

// appendOutRecord appends om's outbound record in state to b: its header
// and its message. In outPubrec the message goes without its payload: a
// resumed exchange in that state sends only a PUBREL (see Start), and a
// version that reads such a record still finds a message. What it reads
// of om does not change once om is made.
func appendOutRecord(b []byte, om *outMsg, state byte) []byte {
	b = session.AppendOutHeader(b, om.pi, state, om.pos)
	if state == outPubrec && len(om.msg.Payload) > 0 {
		bare := *om.msg
		bare.Payload = nil
		b, _ = bare.AppendBinary(b) // AppendBinary returns no error
		return b
	}
	b, _ = om.msg.AppendBinary(b)
	return b
}

// outRecordSize bounds the length of appendOutRecord(om, state).
func outRecordSize(om *outMsg, state byte) int {
	n := session.OutHeaderMax + om.msg.BinarySize()
	if state == outPubrec {
		n -= len(om.msg.Payload)
	}
	return n
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
			o.resumed = map[logpos.Pos]*outMsg{}
		}
		o.resumed[or.Pos] = om
	}
}
