package delivery

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// sender tracks a session's sending goroutine, which runs only while the
// session has something to do: a message routed to it or to catch up on,
// an in-memory delivery, a checkpoint to write, a full window to wait
// out. Whatever gives it work calls wake; the goroutine ends once it
// finds nothing left, so an idle session, of which a fleet has many,
// holds no goroutine and no stack for sending.
//
// The invariant that loses no wake-up: work is made visible before wake
// is called, and the goroutine, before it ends, looks at every source of
// work once more after the last wake it saw (pending).
type sender struct {
	mu      sync.Mutex
	started bool // the session's member of the route exists
	running bool // a goroutine is on, or about to be
	pending bool // woken while running, or before start: look again
	ended   bool // the session is ending: no goroutine starts again
	wg      sync.WaitGroup
	run     func() // the session's run, made at its first wake-up
}

// wake makes sure a sending goroutine looks at the session's work: it
// starts one when none runs, and has a running one look again.
func (o *Session) wake() {
	s := &o.snd
	s.mu.Lock()
	switch {
	case s.ended:
	case s.running || !s.started:
		s.pending = true
	default:
		o.startLocked()
	}
	s.mu.Unlock()
}

// startLocked starts the sending goroutine; snd.mu is held and none runs.
func (o *Session) startLocked() {
	s := &o.snd
	s.running, s.pending = true, false
	s.wg.Add(1)
	// On a runner: a sender runs for moments at a time, and a new
	// goroutine each time would grow a fresh stack each time. The
	// function is made once: a method value per wake-up would be an
	// allocation per delivery.
	if s.run == nil {
		s.run = o.run
	}
	o.env.Runners.Go(s.run)
}

// Writing in passing. A QoS 0 message routed in memory (fanout) is handed
// to the subscriber's sender, and waking a goroutine for it was most of
// what the delivery cost. When the sender is idle and nothing is queued
// before the message, the routing goroutine writes it itself, without
// ever waiting: the sender's lock, the connection's write lock and the
// socket are only tried, and what the socket does not take at once stays
// buffered for the sender, which it starts to finish the write.

// maxSendNow bounds the topic and payload of a message written in
// passing: its PUBLISH fits the connection's write buffer, so encoding it
// sends nothing to the socket.
const maxSendNow = 2 << 10

// MaxSendNowTargets bounds the sessions a routing goroutine writes to in
// passing; past it, each sender writes its own, beside the others.
const MaxSendNowTargets = 4

// SendNow writes d, an in-memory QoS 0 delivery, from the calling
// goroutine (see above), or reports false and leaves d to the caller,
// who queues it for the sender.
func (o *Session) SendNow(d Direct) bool {
	if d.QoS != 0 || len(d.Msg.Topic)+len(d.Msg.Payload) > maxSendNow || !o.conn.InPassing() {
		return false
	}
	s := &o.snd
	if !s.mu.TryLock() {
		return false
	}
	// Holding mu, no sender starts: this goroutine is the session's sender
	// until it lets go.
	if s.ended || s.running || !s.started || s.pending || o.direct.pending() || o.queued.Load() != 0 || o.grp.tx != nil {
		s.mu.Unlock()
		return false
	}
	if d.Msg.Expired(time.Now()) {
		s.mu.Unlock()
		return true
	}
	p, _ := o.env.publishes.Get().(*packet.Publish)
	if p == nil {
		p = new(packet.Publish)
	}
	o.buildPublish(p, delivery{msg: d.Msg, ids: d.IDs, retain: d.Retain}, 0, false)
	written, flushed, err := o.conn.TryWrite(p)
	*p = packet.Publish{}
	o.env.publishes.Put(p)
	if !written {
		s.mu.Unlock()
		return false
	}
	if err == nil && !flushed {
		o.startLocked() // to send the rest, waiting as senders do
	}
	s.mu.Unlock()
	switch {
	case errors.Is(err, packet.ErrPacketTooLarge):
		o.tooLarge(0)
	case err != nil:
		o.conn.Fail(fmt.Errorf("write: %w", err))
	default:
		o.env.Counters.MsgsOut[0].Add(1)
		o.env.Counters.BytesOut.Add(uint64(len(d.Msg.Payload)))
		o.conn.Delivered(0)
	}
	return true
}

// begin starts sending once the session's member of the route exists:
// wakes before it only left work waiting.
func (o *Session) begin() {
	o.snd.mu.Lock()
	o.snd.started = true
	o.snd.mu.Unlock()
	o.wake()
}

// idle reports whether the sending goroutine may end: no wake came since
// it last looked. When it may, the next wake starts another.
func (s *sender) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending && !s.ended {
		s.pending = false
		return false
	}
	s.running = false
	return true
}

// end lets no sending goroutine start again.
func (s *sender) end() {
	s.mu.Lock()
	s.ended, s.running = true, false
	s.mu.Unlock()
}

// run sends until the session has nothing left to do.
func (o *Session) run() {
	defer o.snd.wg.Done()
	for {
		if !o.waitWindow() {
			o.noteBehind(false)
			o.snd.end()
			return
		}
		ev, ok, err := o.sub.Next(o.ctx)
		if err != nil {
			if errors.Is(err, table.ErrHistoryUnavailable) && o.skipTruncated(err) {
				continue // restarted past the gap
			}
			o.noteBehind(false)
			o.snd.end()
			if !errors.Is(err, table.ErrClosed) && o.ctx.Err() == nil {
				o.log.Warn("session replay ended", "err", err)
				o.conn.Disconnect(packet.UnspecifiedError, "session replay failed")
			}
			return
		}
		if ok {
			o.deliverEvent(ev)
			if o.sinceBehind++; o.sinceBehind == behindEvery {
				o.sinceBehind = 0
				o.noteBehind(o.sub.Behind(behindQueue))
			}
			// In-memory deliveries, replays and checkpoints go on between
			// log messages, however long the log.
			o.drainDirect()
			o.drainReplays()
			o.drainTables()
			if o.persistAsk.Swap(false) {
				o.checkpoint()
			}
			continue
		}
		if o.direct.pending() {
			o.drainDirect()
			continue
		}
		if len(o.replayChan()) > 0 {
			o.drainReplays()
			continue
		}
		if len(o.tableChan()) > 0 {
			o.drainTables()
			continue
		}
		if o.persistAsk.Swap(false) {
			o.checkpoint()
			continue
		}
		o.noteBehind(false) // caught up
		// About to end: the records taken so far are committed together
		// and the PUBLISHes written so far go out in one flush.
		o.flushGroup()
		o.conn.Flush()
		if o.ctx.Err() != nil {
			o.snd.end()
			return
		}
		// Let go before idle: once it reports the sender ended, the next
		// may start on another goroutine.
		if o.pub != nil {
			// Zeroed after each write: an idle session keeps none, and
			// the next sender to start, of any session, takes it.
			o.env.publishes.Put(o.pub)
			o.pub = nil
		}
		if o.snd.idle() {
			return
		}
	}
}

// A sender looks at its backlog every behindEvery log messages, and is
// behind (Env.Behind) while at least behindQueue routed messages wait for
// it, or it reads the log on its own to catch up.
const (
	behindEvery = 32
	behindQueue = 64
)

// noteBehind records whether the session's sender is behind the log
// (see Env.Behind). Sender only.
func (o *Session) noteBehind(behind bool) {
	if behind == o.isBehind {
		return
	}
	o.isBehind = behind
	if behind {
		o.env.behind.Add(1)
	} else {
		o.env.behind.Add(-1)
	}
}

// arm asks for a checkpoint write in Env.CheckpointEvery, unless one
// is asked for already. The write is posted to the store goroutines
// (Env.PostStore), or without them asked of the sender.
func (o *Session) arm() {
	if o.armed.CompareAndSwap(false, true) {
		time.AfterFunc(o.env.CheckpointEvery, func() {
			o.armed.Store(false)
			if o.env.PostStore != nil {
				o.env.PostStore(o.checkpointPosted)
			} else {
				o.requestPersist()
			}
		})
	}
}

// checkpointPosted is checkpoint on a store goroutine. The timed
// checkpoints of a fleet come in a wave a second after a delivery to all
// of it: asked of the senders, each would start one and hold it, stack
// and all, waiting for a store goroutine (some 16,000 at once at 19,000
// sessions); posted, each waits as a word in a queue. A record being
// written (a SUBSCRIBE, the sender's own checkpoint) puts it off to the
// next timer: that write carries the checkpoint, and the timer asks again
// only if something is left.
func (o *Session) checkpointPosted() {
	if o.ctx.Err() != nil {
		return // the connection's last write covers it
	}
	o.writeCheckpoint(true)
}

// errBusy says a posted checkpoint found the session record being
// written.
var errBusy = errors.New("delivery: session record busy")

// requestPersist asks the sender for a checkpoint write.
func (o *Session) requestPersist() {
	o.persistAsk.Store(true)
	o.wake()
}

// checkpoint persists the acknowledged checkpoint when it moved.
func (o *Session) checkpoint() { o.writeCheckpoint(false) }

// writeCheckpoint persists the acknowledged checkpoint when it moved, on
// a store goroutine when posted (see persist).
func (o *Session) writeCheckpoint(posted bool) {
	err := o.persist(o.ctx, false, posted)
	busy := errors.Is(err, errBusy)
	if err != nil && !busy && o.ctx.Err() == nil {
		o.log.Warn("persist checkpoint", "err", err)
	}
	// A busy record, completion marks the write made garbage, and
	// exchange endings held back go with the next one.
	if busy || o.garbage() || o.lazy.pending() {
		o.arm()
	}
}

// drainDirect sends the queued in-memory deliveries, and the retained
// messages of the pages still to read, within the window.
func (o *Session) drainDirect() {
	for o.direct.pending() && o.waitWindow() && o.direct.refill() {
		if d, ok := o.direct.take(); ok {
			o.deliverDirect(d)
		}
	}
}

// replayChan returns the channel the session's replays hand events over
// on, nil before its first replay.
func (o *Session) replayChan() chan replayItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.replayCh
}

// drainReplays handles what the replays' forwarders handed over, within
// the window.
func (o *Session) drainReplays() {
	ch := o.replayChan()
	if ch == nil {
		return
	}
	for o.waitWindow() {
		select {
		case it := <-ch:
			o.handleReplay(it)
		default:
			return
		}
	}
}

// waitWindow blocks while the client's receive maximum is reached, or
// the bytes in flight are at Env.MaxInflightBytes: the check comes
// before the next message is read, so the message that takes the bytes
// over goes, and one larger than the bound goes alone.
func (o *Session) waitWindow() bool {
	maxBytes := o.env.MaxInflightBytes
	counted := false
	for {
		o.mu.Lock()
		n, size := len(o.inflight), o.inflightBytes
		o.mu.Unlock()
		overBytes := maxBytes > 0 && n > 0 && size >= maxBytes
		if n < o.window && !overBytes {
			return true
		}
		if overBytes && !counted {
			counted = true
			o.env.Counters.LimitInflightBytes.Add(1)
		}
		o.flushGroup()
		o.conn.Flush()
		select {
		case <-o.freed:
		case <-o.ctx.Done():
			return false
		}
	}
}

// Stop ends the sender and takes the session off the route. The ack loop
// must have ended: it may be the one to start the sender. A session whose
// connection ended before its CONNACK went out has no sender to stop.
func (o *Session) Stop() {
	// After this no posted checkpoint writes (one writing now finishes
	// first): the connection's last write, or its discard, comes next.
	o.recordMu.Lock()
	o.stopped = true
	o.recordMu.Unlock()
	o.endReplays()
	o.endTableFeeds()
	o.snd.end()
	if sub := o.currentSub(); sub != nil {
		sub.Close()
		o.env.Router.Leave(o.client, sub)
	}
	o.snd.wg.Wait()
	o.direct.dropPages()
	o.ungauge()
}

// ungauge takes the deliveries still in flight out of the in-flight
// gauge: the connection ended, and a resume sends them again, counted
// anew.
func (o *Session) ungauge() {
	o.mu.Lock()
	n := 0
	for _, om := range o.inflight {
		if om.gauged {
			om.gauged = false
			n++
		}
	}
	o.mu.Unlock()
	o.env.Counters.InflightOut.Add(int64(-n))
}
