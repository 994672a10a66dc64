package broker

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// limitPublishRate is the name of Options.MaxPublishRate in
// Stats.LimitHits.
const limitPublishRate = "publish_rate"

// throttle holds the read loop before a PUBLISH while the connection is
// over Options.MaxPublishRate, and reports whether the connection goes
// on. Waiting in the read loop, rather than refusing, slows the client
// down by TCP flow control: MQTT has no way to ask a client to publish
// more slowly short of disconnecting it (0x96), and a refused QoS 1/2
// message would only be sent again. What the loop already took is
// committed and acknowledged before the wait, so the client's window
// drains while it is held.
func (c *conn) throttle(p packet.Packet) bool {
	limit := c.b.opts.MaxPublishRate
	if limit <= 0 || p.Type() != packet.TypePublish {
		return true
	}
	if c.rate == nil {
		// Made at the first PUBLISH: a subscriber never needs one.
		c.rate = rate.NewLimiter(rate.Limit(limit), max(1, int(limit)))
	}
	wait := c.rate.Reserve().Delay()
	if wait <= 0 {
		return true
	}
	c.b.metrics.LimitPublishRate.Add(1)
	if !c.flushGroup() {
		return false
	}
	if c.unflushed {
		c.unflushed = false
		c.flush()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}
