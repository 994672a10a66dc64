package delivery

// The packet ids of a session's outbound QoS 1 and QoS 2 exchanges.

// packetIDLocked picks the packet id for the QoS 1 or 2 delivery d; o.mu
// held. A QoS 1 delivery of a log event that was in flight when the
// session was last persisted (q1ids) gets its id back: an unacknowledged
// PUBLISH is re-sent with its original packet id [MQTT-4.4.0-1]. The
// restored id is used once, and only when no open exchange holds it.
// Everything else takes the next free id.
func (o *Session) packetIDLocked(d delivery) uint16 {
	pos := o.posOf(d.ev)
	pi, ok := o.q1ids[pos]
	if ok {
		delete(o.q1ids, pos)
	}
	if !ok || d.qos != 1 || !d.hasEv || pi == 0 || o.inflight[pi] != nil {
		pi = o.allocPI()
	}
	return pi
}

// allocPI takes the next packet id after the last one given, skipping 0,
// the ids of open exchanges and those of ended QoS 2 exchanges whose
// record delete has not committed yet (o.ending); o.mu held. nextPI is
// kept in the session record (see sessionSweepTx) and restored from it.
func (o *Session) allocPI() uint16 {
	for {
		o.nextPI++
		if o.nextPI == 0 {
			o.nextPI = 1
		}
		if _, held := o.ending[o.nextPI]; !held && o.inflight[o.nextPI] == nil {
			return o.nextPI
		}
	}
}
