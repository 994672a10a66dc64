package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The crash-loop torture: a broker in a child process under QoS 1 and
// QoS 2 load from several publishers, with persistent subscribers online
// and one offline, killed with SIGKILL at random moments. Publishers and
// subscribers are compliant clients over the broker's own codec that keep
// their session state across reconnects (in-flight PUBLISHes re-sent with
// DUP, PUBRELs re-sent, QoS 2 packet identifiers held until PUBREL), so
// what the checks find is the broker's doing: every acknowledged message
// (QoS 1: PUBACK; QoS 2: PUBREC) delivered to every subscriber, no QoS 2
// message delivered twice, first deliveries in per-publisher order.

// TortureOptions configures Torture.
type TortureOptions struct {
	// Start starts a broker on the data directory dir serving MQTT at
	// addr (which stays the same across restarts) and returns when it
	// listens; kill ends it with SIGKILL and returns when it is gone.
	Start func(t T, dir, addr string) (kill func())
	// Addr is the MQTT address the broker serves at.
	Addr string
	// Kills is the number of SIGKILLs, at random moments under load.
	Kills int
	// Messages is how many messages each publisher sends.
	Messages int
	// Publishers is the number of publishers, QoS 1 and QoS 2 in turn
	// (at least 2).
	Publishers int
	// QoS, when 1 or 2, makes every publisher publish at that QoS
	// instead.
	QoS packet.QoS
	// Window is each publisher's unacknowledged PUBLISHes in flight.
	Window int
	// Online is the number of persistent subscribers that stay online,
	// reconnecting after every kill (2 when zero); one more stays
	// offline until the publishers finished.
	Online int
	// MaxUptime bounds the random time the broker runs before a kill.
	MaxUptime time.Duration
	// MaxQoS1DupsPerKill, when positive, bounds the QoS 1 deliveries
	// beyond the first, per subscriber and kill, on average over the run:
	// a session's progress is durable as it goes, so a crash re-sends
	// about what was in flight, not what was delivered since it last
	// connected.
	MaxQoS1DupsPerKill int
}

// TortureReport is what a Torture run counted.
type TortureReport struct {
	// Kills is the number of SIGKILLs done.
	Kills int
	// Acked is the number of acknowledged messages, by QoS (index 1, 2).
	Acked [3]int
	// Subscribers is the number of persistent subscribers checked.
	Subscribers int
	// Lost counts acknowledged messages some subscriber never received
	// (summed over subscribers); QoS2Duplicates QoS 2 messages received
	// more than once (summed over subscribers).
	Lost, QoS2Duplicates int
	// QoS1Deliveries and QoS1Distinct count QoS 1 deliveries and distinct
	// QoS 1 messages received, summed over subscribers: their ratio is
	// the duplicate factor.
	QoS1Deliveries, QoS1Distinct int
}

// QoS1DuplicatesPerKill is the QoS 1 deliveries beyond the first per
// subscriber and kill.
func (r TortureReport) QoS1DuplicatesPerKill() float64 {
	if r.Kills == 0 || r.Subscribers == 0 {
		return 0
	}
	return float64(r.QoS1Deliveries-r.QoS1Distinct) / float64(r.Kills*r.Subscribers)
}

func (r TortureReport) String() string {
	factor := 0.0
	if r.QoS1Distinct > 0 {
		factor = float64(r.QoS1Deliveries) / float64(r.QoS1Distinct)
	}
	return fmt.Sprintf("kills %d, acknowledged QoS 1 %d, QoS 2 %d, subscribers %d: lost %d, QoS 2 duplicated %d, QoS 1 deliveries %d for %d messages (x%.3f, %.1f duplicates per kill and subscriber)",
		r.Kills, r.Acked[1], r.Acked[2], r.Subscribers, r.Lost, r.QoS2Duplicates, r.QoS1Deliveries, r.QoS1Distinct, factor, r.QoS1DuplicatesPerKill())
}

// Torture runs the crash loop and checks it; it returns the counts.
func Torture(t T, o TortureOptions) TortureReport {
	t.Helper()
	if o.Publishers < 2 {
		o.Publishers = 2
	}
	if o.Window <= 0 {
		o.Window = 32
	}
	if o.MaxUptime <= 0 {
		o.MaxUptime = time.Second
	}
	if o.Online <= 0 {
		o.Online = 2
	}
	dir := t.TempDir()
	kill := o.Start(t, dir, o.Addr)
	defer func() { kill() }()

	const filter = "torture/#"
	var online []*subscriber
	for i := range o.Online {
		v := []packet.Version{packet.V311, packet.V5}[i%2]
		online = append(online, newSubscriber(t, fmt.Sprintf("online-%d", i), o.Addr, fmt.Sprintf("torture-online-%d", i), v, filter, packet.QoS2))
	}
	offline := newSubscriber(t, "offline", o.Addr, "torture-offline", packet.V5, filter, packet.QoS2)
	offline.drop()

	pubs := make([]*torturePub, o.Publishers)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range pubs {
		qos := packet.QoS1 + packet.QoS(i%2)
		if o.QoS == packet.QoS1 || o.QoS == packet.QoS2 {
			qos = o.QoS
		}
		p := &torturePub{t: t, addr: o.Addr, id: fmt.Sprintf("pub%d", i), qos: qos, n: o.Messages, window: o.Window,
			v: []packet.Version{packet.V311, packet.V5}[(i/2)%2], inflight: map[uint16]*tortureMsg{}, acked: make([]bool, o.Messages)}
		pubs[i] = p
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(stop)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	rep := TortureReport{Subscribers: len(online) + 1}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 18))
	busy := finished
	for rep.Kills < o.Kills {
		select {
		case <-busy:
			t.Logf("the publishers finished after %d kills; the rest of the kills find the broker idle", rep.Kills)
			busy = nil // log once; a nil channel never fires again
		case <-time.After(time.Duration(rng.Int64N(int64(o.MaxUptime)) + int64(50*time.Millisecond))):
		}
		kill()
		rep.Kills++
		restart := time.Now()
		kill = o.Start(t, dir, o.Addr)
		if rep.Kills%25 == 0 {
			t.Logf("kill %d of %d; the broker served again %v after it", rep.Kills, o.Kills, time.Since(restart).Round(time.Millisecond))
		}
		for _, s := range online {
			s.reconnectRetry(o.Addr)
		}
	}
	select {
	case <-finished:
	case <-time.After(5 * time.Minute):
		close(stop)
		wg.Wait()
		t.Fatalf("publishers did not finish within 5 minutes after the last kill")
	}
	offline.reconnect(o.Addr)

	// Every subscriber must take every acknowledged message.
	var want []string
	for _, p := range pubs {
		for seq, ok := range p.acked {
			if ok {
				want = append(want, p.payload(seq))
				rep.Acked[p.qos]++
			}
		}
	}
	for _, s := range append(online, offline) {
		// A full check reads every delivery: it runs once the subscriber
		// holds as many distinct messages as are wanted, at most every
		// quarter second, so a subscriber catching up on a long backlog
		// is not slowed by its own checker.
		deadline := time.Now().Add(2 * time.Minute)
		var checked time.Time
		for {
			last := time.Now().After(deadline)
			if last || (s.distinct() >= len(want) && time.Since(checked) > 250*time.Millisecond) {
				checked = time.Now()
				n := countPayloads(s.deliveries())
				missing := 0
				for _, w := range want {
					if n[w] == 0 {
						missing++
					}
				}
				if missing == 0 || last {
					rep.Lost += missing
					break
				}
			}
			select {
			case <-s.changed:
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	time.Sleep(quiet) // duplicates still on their way count too
	for _, s := range append(online, offline) {
		got := s.deliveries()
		n := countPayloads(got)
		last := map[string]int{}
		qos := map[string]packet.QoS{} // each message's QoS, from its first delivery
		for _, d := range got {
			if d.QoS == packet.QoS1 {
				rep.QoS1Deliveries++
			}
			if _, seen := qos[d.Payload]; seen {
				continue
			}
			qos[d.Payload] = d.QoS
			pub, seqS, _ := strings.Cut(d.Payload, "/")
			seq, _ := strconv.Atoi(seqS)
			if l, ok := last[pub]; ok && seq <= l {
				t.Errorf("%s: first delivery of %s after %s/%d: out of publisher order", s.name, d.Payload, pub, l)
			}
			last[pub] = seq
		}
		for p, c := range n {
			q := qos[p]
			switch {
			case q == packet.QoS1:
				rep.QoS1Distinct++
			case q == packet.QoS2 && c > 1:
				rep.QoS2Duplicates += c - 1
				t.Errorf("%s: QoS 2 message %s delivered %d times: %s", s.name, p, c, deliveriesOf(got, p))
			}
		}
		for _, w := range want {
			if n[w] == 0 {
				t.Errorf("%s: acknowledged message %s never delivered", s.name, w)
				break
			}
		}
		q1, q1n := 0, 0
		for p, c := range n {
			if qos[p] == packet.QoS1 {
				q1, q1n = q1+c, q1n+1
			}
		}
		t.Logf("%s: %d QoS 1 deliveries for %d messages, %d deliveries in all", s.name, q1, q1n, len(got))
		if o.MaxQoS1DupsPerKill > 0 && rep.Kills > 0 && q1-q1n > o.MaxQoS1DupsPerKill*rep.Kills {
			t.Errorf("%s: %d QoS 1 duplicates in %d kills, over %d per kill", s.name, q1-q1n, rep.Kills, o.MaxQoS1DupsPerKill)
		}
	}
	if rep.Lost > 0 {
		t.Errorf("%d acknowledged deliveries lost", rep.Lost)
	}
	return rep
}

// reconnectRetry resumes the subscriber's session, retrying while the
// broker comes up; the session must be present.
func (s *subscriber) reconnectRetry(addr string) {
	s.t.Helper()
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	<-stopped // the killed broker's connection ended
	deadline := time.Now().Add(waitFor)
	for {
		c, err := mqtttest.TryDialRaw(s.t, s.name, addr, s.v)
		if err == nil {
			if ack, err := c.TryConnect(s.connectPacket()); err == nil {
				if !ack.SessionPresent {
					s.t.Fatalf("%s: session not present after a restart", s.name)
				}
				s.run(c)
				return
			}
			_ = c.Conn().Close()
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: could not reconnect within %v: %v", s.name, waitFor, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// torturePub is one publisher: a persistent session that sends its
// messages with up to window in flight and, after every reconnect,
// re-sends what was not yet acknowledged as the spec asks.
type torturePub struct {
	t      T
	addr   string
	id     string
	v      packet.Version
	qos    packet.QoS
	n      int
	window int

	next     int // next sequence number to send
	pid      uint16
	inflight map[uint16]*tortureMsg
	acked    []bool // by sequence number: PUBACK, or PUBREC for QoS 2
	done     int    // messages whose exchange is complete
}

type tortureMsg struct {
	seq      int
	pid      uint16
	released bool // PUBREC came, PUBREL sent
}

func (p *torturePub) payload(seq int) string { return fmt.Sprintf("%s/%d", p.id, seq) }

func (p *torturePub) publish(seq int, pid uint16, dup bool) *packet.Publish {
	return &packet.Publish{Topic: "torture/" + p.id, PacketID: pid, QoS: p.qos, Dup: dup, Payload: []byte(p.payload(seq))}
}

// run publishes until every message's exchange is complete or stop.
func (p *torturePub) run(stop <-chan struct{}) {
	first := true
	for p.done < p.n {
		c, err := mqtttest.TryDialRaw(p.t, p.id, p.addr, p.v)
		if err == nil {
			cp := mqtttest.ConnectPacket(p.id, p.v, first)
			if p.v == packet.V311 {
				cp.CleanStart = false
			}
			if _, err = c.TryConnect(cp); err == nil {
				first = false
				p.session(c, stop)
			}
			_ = c.Conn().Close()
		}
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// session runs one connection: re-send what is in flight, then keep the
// window full until the connection ends or every exchange completed.
func (p *torturePub) session(c *rawClient, stop <-chan struct{}) {
	pids := make([]uint16, 0, len(p.inflight))
	for pid := range p.inflight {
		pids = append(pids, pid)
	}
	slices.SortFunc(pids, func(a, b uint16) int { return p.inflight[a].seq - p.inflight[b].seq })
	for _, pid := range pids {
		m := p.inflight[pid]
		var pk packet.Packet = p.publish(m.seq, pid, true)
		if m.released {
			pk = &packet.Pubrel{PacketID: pid}
		}
		if c.TrySend(pk) != nil {
			return
		}
	}
	for p.done < p.n {
		for len(p.inflight) < p.window && p.next < p.n {
			p.pid = p.pid%0xFFFF + 1
			for p.inflight[p.pid] != nil {
				p.pid = p.pid%0xFFFF + 1
			}
			m := &tortureMsg{seq: p.next, pid: p.pid}
			p.inflight[m.pid] = m
			p.next++
			if c.TrySend(p.publish(m.seq, m.pid, false)) != nil {
				return
			}
		}
		pk, ok := c.Next(time.Second)
		if !ok {
			select {
			case <-c.Done():
				return
			case <-stop:
				return
			default:
				continue
			}
		}
		switch pk := pk.(type) {
		case *packet.Puback:
			if m := p.inflight[pk.PacketID]; m != nil && p.qos == packet.QoS1 {
				delete(p.inflight, pk.PacketID)
				if !pk.ReasonCode.IsError() {
					p.acked[m.seq] = true
				}
				p.done++
			}
		case *packet.Pubrec:
			if m := p.inflight[pk.PacketID]; m != nil && p.qos == packet.QoS2 {
				if pk.ReasonCode.IsError() {
					delete(p.inflight, pk.PacketID)
					p.done++
					continue
				}
				p.acked[m.seq] = true
				m.released = true
				if c.TrySend(&packet.Pubrel{PacketID: pk.PacketID}) != nil {
					return
				}
			}
		case *packet.Pubcomp:
			if m := p.inflight[pk.PacketID]; m != nil && m.released {
				delete(p.inflight, pk.PacketID)
				p.done++
			}
		case *packet.Disconnect:
			return
		}
	}
}

// deliveriesOf describes each delivery of payload p in got: on which
// connection of the subscriber, under which packet id, with DUP or not.
func deliveriesOf(got []delivery, p string) string {
	var b strings.Builder
	for i, d := range got {
		if d.Payload == p {
			fmt.Fprintf(&b, "[#%d conn %d pi %d dup %v] ", i, d.Conn, d.PI, d.Dup)
		}
	}
	return b.String()
}
