package broker

import (
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/netio"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// Limit defaults.
const (
	// DefaultConnectTimeout is how long a socket may take to send its
	// CONNECT.
	DefaultConnectTimeout = 10 * time.Second
	// MaxTopicLength is the longest topic name or filter the protocol can
	// carry, in bytes, and the default of Options.MaxTopicLength.
	MaxTopicLength = 65535
	// DefaultSessionExpiry is the default of Options.SessionExpiry: a
	// week. A device offline over a long weekend, a holiday or a repair
	// comes back to its session and its queued messages; one that never
	// comes back (decommissioned, or its client id changed) stops
	// holding the message log, and the disk, a week after it left. The
	// log holds every message published after a gone session's
	// checkpoint, not only its own, so without a bound one gone session
	// would keep the whole log forever.
	DefaultSessionExpiry = 7 * 24 * time.Hour
	// DefaultMaxQueuedMessages is the default of
	// Options.MaxQueuedMessages: mosquitto keeps 1,000 per client in
	// memory; Tidemark's queue is the message log on disk, so it keeps a
	// hundred times that. Until its session expires, a gone session
	// subscribed to busy topics then holds the log from its newest
	// 100,000 messages only.
	DefaultMaxQueuedMessages = 100_000
	// DefaultCheckpointEvery is the default of Options.CheckpointEvery.
	DefaultCheckpointEvery = time.Second
	// MaxPacketSizeLimit is the largest Options.MaxPacketSize. Every
	// packet the broker takes must fit, in the form it stores it, in one
	// engine value: a message is stored with its topic and its publisher's
	// client id beside the packet's bytes (a log entry adds the topic
	// again, a staged copy the client id), each at most 64 KiB, and
	// 256 KiB below engine.MaxValueSize leaves room for them all. Above
	// it, a PUBLISH the packet limit lets in could fail in the store and
	// end its connection as a store failure.
	MaxPacketSizeLimit = engine.MaxValueSize - 256<<10
	// lingerTimeout bounds how long a connection that sent a DISCONNECT
	// or a refusing CONNACK reads what the client still sends before the
	// socket closes (see conn.linger).
	lingerTimeout = 2 * time.Second
	// maxKeptAcks bounds the acknowledgement FIFO a busy parking
	// connection keeps between bursts: a client pipelining 256 deep
	// reuses one array (the append that grows it to 256 entries rounds up
	// past 256, hence the margin) instead of growing nine after every
	// burst. The array goes once the connection parks, so only busy
	// connections hold one, at most some 150 KB each.
	maxKeptAcks = 1024
)

// Names of the configured limits in Stats.LimitHits.
const (
	limitTopicLength   = "topic_length"
	limitTopicLevels   = "topic_levels"
	limitSubscriptions = "subscriptions"
	limitInflightBytes = "inflight_bytes"
	limitQueuedBytes   = "queued_bytes"
)

// normLimits applies the defaults of the limit options.
func (o *Options) normLimits() {
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections()
	}
	if o.MaxConnRate < 0 {
		o.MaxConnRate = 0
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.MaxTopicLength <= 0 || o.MaxTopicLength > MaxTopicLength {
		o.MaxTopicLength = MaxTopicLength
	}
	if o.MaxTopicLevels < 0 {
		o.MaxTopicLevels = 0
	}
	if o.MaxSubscriptions < 0 {
		o.MaxSubscriptions = 0
	}
	if o.MaxMemory < 0 {
		o.MaxMemory = 0
	}
	if o.MaxPublishRate < 0 {
		o.MaxPublishRate = 0
	}
	if o.MaxRetained < 0 {
		o.MaxRetained = 0
	}
	switch {
	case o.SessionExpiry == 0:
		o.SessionExpiry = DefaultSessionExpiry
	case o.SessionExpiry < 0:
		o.SessionExpiry = 0 // no bound (expiryCap)
	}
	switch {
	case o.MaxQueuedMessages == 0:
		o.MaxQueuedMessages = DefaultMaxQueuedMessages
	case o.MaxQueuedMessages < 0:
		o.MaxQueuedMessages = 0 // no cap (see queuelimit)
	}
	if o.MaxQueuedBytes < 0 {
		o.MaxQueuedBytes = 0
	}
	if o.MaxInflightBytes < 0 {
		o.MaxInflightBytes = 0
	}
}

// DefaultMaxConnections is the default of Options.MaxConnections: the
// process's open-file limit less the descriptors the engine, listeners and
// logs need (a tenth of the limit, at least 64), so a flood of sockets
// meets the cap before the process runs out of descriptors.
func DefaultMaxConnections() int {
	n := netio.OpenFileLimit()
	if n <= 0 {
		return 10000
	}
	return max(n-max(n/10, 64), 1)
}

// ErrTopicLimit reports a topic name or filter over a configured limit.
var ErrTopicLimit = fmt.Errorf("mqtt: topic over a configured limit")

// checkTopic checks a topic name or filter against the configured length
// and level limits, counting a refusal. It reports which limit was hit.
func (b *Broker) checkTopic(name string) error {
	if len(name) > b.opts.MaxTopicLength {
		b.metrics.LimitTopicLength.Add(1)
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrTopicLimit, len(name), b.opts.MaxTopicLength)
	}
	if m := b.opts.MaxTopicLevels; m > 0 && strings.Count(name, "/")+1 > m {
		b.metrics.LimitTopicLevels.Add(1)
		return fmt.Errorf("%w: %d levels, the limit is %d", ErrTopicLimit, strings.Count(name, "/")+1, m)
	}
	return nil
}

// refuseTopic answers a PUBLISH whose topic is over a limit without storing
// it: a 5.0 QoS 1 or 2 PUBLISH gets its PUBACK or PUBREC with 0x90 Topic
// Name invalid, in packet order, so the client stops re-sending it; a 5.0
// QoS 0 PUBLISH gets DISCONNECT 0x90; a 3.1.1 client, which has no way to
// hear a refusal, loses its connection, and the message is never
// acknowledged. False ends the read loop.
func (c *conn) refuseTopic(p *packet.Publish, err error) bool {
	c.log.Debug("publish refused", "err", err)
	if c.version != packet.V5 {
		c.fail(err)
		return false
	}
	switch p.QoS {
	case packet.QoS1:
		return c.ack(ackEntry{pkt: &packet.Puback{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}, pi: p.PacketID})
	case packet.QoS2:
		return c.ack(ackEntry{pkt: &packet.Pubrec{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}, pi: p.PacketID})
	}
	c.disconnect(packet.TopicNameInvalid, err.Error())
	return false
}

// subscriptionAllowed reports whether a session holding have subscriptions
// may add one more, counting a refusal.
func (b *Broker) subscriptionAllowed(have int) bool {
	if m := b.opts.MaxSubscriptions; m > 0 && have >= m {
		b.metrics.LimitSubscriptions.Add(1)
		return false
	}
	return true
}

// expiryCap is the longest session expiry a session gets, in seconds, or 0
// for no cap: Options.SessionExpiry for every session, and
// Options.MaxSessionExpiry as well for 5.0 ones.
func (b *Broker) expiryCap(v5 bool) uint32 {
	m := b.opts.SessionExpiry
	if v5 && b.opts.MaxSessionExpiry > 0 && (m == 0 || b.opts.MaxSessionExpiry < m) {
		m = b.opts.MaxSessionExpiry
	}
	if m <= 0 {
		return 0
	}
	return uint32(min(m/time.Second, session.NeverExpires-1))
}

// persistentExpiry is the session expiry of a 3.1.1 persistent session:
// never, unless Options.SessionExpiry bounds it.
func (b *Broker) persistentExpiry() uint32 {
	if m := b.expiryCap(false); m > 0 {
		return m
	}
	return session.NeverExpires
}

// Options returns the broker's options with the defaults applied
// (mqtt.Broker.Options).
func (b *Broker) Options() Options { return b.opts }
