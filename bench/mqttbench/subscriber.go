package mqttbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// subscriber receives a point's messages and checks them.
type subscriber struct {
	c   *conn
	run uint32
	qos packet.QoS
	// notify tells a QoS 0 publisher its message arrived (its window).
	notify func(pub uint32, seq uint64, at time.Time)

	mu        sync.Mutex
	seen      []bitset
	high      []uint64 // per publisher: 1 + the highest sequence delivered
	unique    int
	dups      int
	reordered int
	protoErrs protoErrors
	last      time.Time
	readErr   error
	// from is the end of the warm-up: deliveries from it on are timed
	// into delivery, as acknowledgements are into the publishers'
	// latencies.
	from     time.Time
	delivery histogram
	// awaiting holds the packet ids of QoS 2 deliveries that got their
	// PUBREC and wait for the PUBREL: a PUBLISH re-sent on one of them is
	// the same delivery, not a duplicate.
	awaiting map[uint16]bool
	done     chan struct{}
}

// subscribe connects (on a blocking socket with blocking, see dial) and
// subscribes to filter at qos.
func subscribe(ctx context.Context, addr, clientID, filter string, run uint32, qos packet.QoS, pubs int, blocking bool) (*subscriber, error) {
	c, err := dial(ctx, addr, clientID, blocking)
	if err != nil {
		return nil, err
	}
	s := &subscriber{c: c, run: run, qos: qos, seen: make([]bitset, pubs), high: make([]uint64, pubs),
		awaiting: map[uint16]bool{}, done: make(chan struct{})}
	_ = c.nc.SetDeadline(time.Now().Add(15 * time.Second))
	err = c.send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: filter, QoS: qos}}})
	if err == nil {
		var p packet.Packet
		if p, err = c.rd.ReadPacket(); err == nil {
			ack, ok := p.(*packet.Suback)
			if !ok || len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != packet.ReasonCode(qos) {
				err = fmt.Errorf("SUBACK for QoS %d: got %v", qos, describe(p))
			}
		}
	}
	if err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("subscribe %s: %w", filter, err)
	}
	_ = c.nc.SetDeadline(time.Time{})
	go s.read()
	return s, nil
}

func (s *subscriber) read() {
	defer close(s.done)
	for {
		pk, err := s.c.rd.ReadPacket()
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
		var reply packet.Packet
		switch pk := pk.(type) {
		case *packet.Publish:
			reply = s.receive(pk)
		case *packet.Pubrel:
			s.mu.Lock()
			delete(s.awaiting, pk.PacketID)
			s.mu.Unlock()
			reply = &packet.Pubcomp{PacketID: pk.PacketID}
		default:
			s.mu.Lock()
			s.protoErrs.add("a %s sent to a subscriber", describe(pk))
			s.mu.Unlock()
		}
		if err := s.c.reply(reply); err != nil {
			s.mu.Lock()
			s.readErr = err
			s.mu.Unlock()
			return
		}
	}
}

// receive checks one PUBLISH and returns its acknowledgement.
func (s *subscriber) receive(pk *packet.Publish) packet.Packet {
	defer pk.Release()
	now := time.Now()
	qos, pi := pk.QoS, pk.PacketID
	var reply packet.Packet
	switch qos {
	case packet.QoS1:
		reply = &packet.Puback{PacketID: pi}
	case packet.QoS2:
		reply = &packet.Pubrec{PacketID: pi}
	}
	run, pub, seq, sent, ok := decodePayload(pk.Payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	if qos != s.qos {
		s.protoErrs.add("a QoS %d delivery where QoS %d was due", qos, s.qos)
	}
	if qos == packet.QoS2 {
		if s.awaiting[pi] {
			if pk.Dup {
				return reply // the same delivery again
			}
			s.protoErrs.add("a new QoS 2 PUBLISH on packet id %d, whose last delivery was still waiting for its PUBREL (%d ids were)", pi, len(s.awaiting))
		}
		s.awaiting[pi] = true
	}
	if !ok || run != s.run || int(pub) >= len(s.seen) {
		s.protoErrs.add("a message on topic %q that no publisher of this run sent", pk.Topic)
		return reply
	}
	s.last = now
	if s.seen[pub].set(seq) {
		s.dups++
		return reply
	}
	s.unique++
	if !s.from.IsZero() && !now.Before(s.from) {
		s.delivery.add(now.Sub(sent))
	}
	if seq+1 < s.high[pub] {
		s.reordered++
	} else {
		s.high[pub] = seq + 1
	}
	if s.notify != nil {
		s.notify(pub, seq, now)
	}
	return reply
}

// wait returns once every message in acked was delivered, or no message
// arrived for idle, or ctx ended.
func (s *subscriber) wait(ctx context.Context, acked []bitset, idle time.Duration) {
	want := 0
	for _, b := range acked {
		want += b.count()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for {
		s.mu.Lock()
		unique, last, failed := s.unique, s.last, s.readErr != nil
		s.mu.Unlock()
		if failed || (unique >= want && s.missing(acked) == 0) {
			return
		}
		if last.Before(start) {
			last = start
		}
		if time.Since(last) > idle {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// missing counts acknowledged messages not delivered.
func (s *subscriber) missing(acked []bitset) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, b := range acked {
		n += b.missing(s.seen[i])
	}
	return n
}
