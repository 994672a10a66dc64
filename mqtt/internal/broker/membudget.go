package broker

import (
	rtmetrics "runtime/metrics"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// The global memory budget (Options.MaxMemory). Queued data lives in
// many places (commit pipelines, QoS 2 copies, delivery queues, the
// router), so the broker measures what they add up to where it matters,
// the Go heap, rather than counting each: a sampler reads the heap's
// live objects every memSampleEvery and, over the budget, new publishes
// are refused before they are stored: QoS 0 dropped, QoS 1 and 2 answered
// with Quota exceeded (0x97) on 5.0, and the connection closed on 3.1.1,
// whose acknowledgements cannot refuse (its client re-sends after
// reconnecting). Deliveries and acknowledgements go on, which is what
// brings the heap back under the budget.

// memSampleEvery is the period of heap samples under a memory budget.
const memSampleEvery = 50 * time.Millisecond

// limitMemory names the budget in Stats.LimitHits.
const limitMemory = "memory"

// heapMetric is the runtime metric the budget is held against: bytes in
// live and not yet swept heap objects.
const heapMetric = "/memory/classes/heap/objects:bytes"

// sampleMemory keeps b.overBudget current until the broker closes.
func (b *Broker) sampleMemory() {
	defer b.wg.Done()
	s := []rtmetrics.Sample{{Name: heapMetric}}
	t := time.NewTicker(memSampleEvery)
	defer t.Stop()
	for {
		rtmetrics.Read(s)
		over := s[0].Value.Kind() == rtmetrics.KindUint64 && int64(s[0].Value.Uint64()) > b.opts.MaxMemory
		if was := b.overBudget.Swap(over); was != over {
			if over {
				b.log.Warn("heap over the memory budget: refusing new publishes", "heap_bytes", s[0].Value.Uint64(), "budget_bytes", b.opts.MaxMemory)
			} else {
				b.log.Info("heap back under the memory budget: taking publishes again", "heap_bytes", s[0].Value.Uint64())
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refuseOverBudget answers a PUBLISH that arrived over the memory budget;
// false means the connection is ending.
func (c *conn) refuseOverBudget(p *packet.Publish) bool {
	c.b.metrics.LimitMemory.Add(1)
	switch {
	case p.QoS == packet.QoS0:
		c.b.metrics.DroppedMemory.Add(1)
		return true
	case c.version != packet.V5:
		c.disconnect(packet.QuotaExceeded, "over the broker's memory budget")
		return false
	case p.QoS == packet.QoS1:
		return c.ack(ackEntry{pkt: &packet.Puback{PacketID: p.PacketID, ReasonCode: packet.QuotaExceeded}, pi: p.PacketID})
	}
	// A re-sent PUBLISH of an exchange already staged is owed its PUBREC:
	// the message is stored.
	if ex := c.exchanges[p.PacketID]; ex != nil && !ex.released {
		return c.ack(ackEntry{pkt: &packet.Pubrec{PacketID: p.PacketID}, pi: p.PacketID})
	}
	return c.ack(ackEntry{pkt: &packet.Pubrec{PacketID: p.PacketID, ReasonCode: packet.QuotaExceeded}, pi: p.PacketID})
}
