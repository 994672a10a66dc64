package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark-io/tidemark/mqtt/internal/tabletopic"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
)

// ErrTableTopic reports a topic or filter under Options.TablesPrefix that
// names no record or table the broker may use: no table or id level, a
// wildcard in the table level, a reserved or over-long table name, an
// over-long id.
var ErrTableTopic = tabletopic.ErrTopic

// normTablesPrefix checks and completes Options.TablesPrefix: a topic
// name without wildcards, ending with "/".
func normTablesPrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if !topic.ValidName(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, ReplayPrefix) || strings.HasPrefix(p, "$share/") {
		return "", fmt.Errorf("%w: tables prefix %q: use a topic name without wildcards, such as tables/", ErrTableTopic, p)
	}
	return p, nil
}

// refuseTableTopic answers a PUBLISH on an invalid topic under the
// tables prefix without writing it: 5.0 gets 0x90 Topic Name invalid
// with a reason string in its PUBACK or PUBREC (DISCONNECT for QoS 0); a
// 3.1.1 client, which cannot be told, gets its acknowledgement and the
// message is dropped, as for a publish its ACL refuses.
func (c *conn) refuseTableTopic(p *packet.Publish, err error) bool {
	c.log.Info("publish refused", "topic", p.Topic, "err", err)
	c.b.metrics.TableRefused.Add(1)
	if c.version != packet.V5 {
		return c.refusePublish(p)
	}
	switch p.QoS {
	case packet.QoS1:
		ack := &packet.Puback{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}
		ack.Properties.SetReasonString(err.Error())
		return c.ack(ackEntry{pkt: ack, pi: p.PacketID})
	case packet.QoS2:
		ack := &packet.Pubrec{PacketID: p.PacketID, ReasonCode: packet.TopicNameInvalid}
		ack.Properties.SetReasonString(err.Error())
		return c.ack(ackEntry{pkt: ack, pi: p.PacketID})
	}
	c.disconnect(packet.TopicNameInvalid, err.Error())
	return false
}

// publishTable writes an in-process publication on a topic under the
// tables prefix, whatever its QoS, and waits for the commit.
func (b *Broker) publishTable(ctx context.Context, m *Message) error {
	tx := b.db.Begin()
	if err := b.tables.AddWrite(tx, m); err != nil {
		if errors.Is(err, ErrTableTopic) {
			b.metrics.TableRefused.Add(1)
		}
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	b.metrics.TableWrites.Add(1)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("mqtt: publish %q: %w", m.Topic, err)
	}
	return nil
}

// submitTable writes a QoS 0 PUBLISH on a topic under the tables prefix
// without waiting for the commit (at most once, as QoS 0 is).
func (b *Broker) submitTable(ctx context.Context, m *Message) {
	tx := b.db.Begin()
	err := b.tables.AddWrite(tx, m)
	if err == nil {
		_, err = tx.Submit(ctx)
	}
	if err != nil {
		b.log.Warn("table write failed", "topic", m.Topic, "err", err)
	}
}

// checkTableFilter checks a SUBSCRIBE filter (sh, shared as
// topic.ParseShared returned them) against the tables prefix: a filter
// under it must name one table, and cannot be shared.
func (c *conn) checkTableFilter(filter string, sh topic.Shared, shared bool) (packet.ReasonCode, error) {
	inner := filter
	if shared {
		inner = sh.Filter
	}
	if !c.b.tables.Contains(inner) {
		return 0, nil
	}
	rc, err := packet.ReasonCode(0), error(nil)
	if shared {
		rc, err = packet.SharedSubscriptionsNotSupported, fmt.Errorf("%w: %q: a table subscription cannot be shared", ErrTableTopic, filter)
	} else if _, err = c.b.tables.ParseFilter(inner); err != nil {
		rc = packet.TopicFilterInvalid
	}
	if err != nil {
		c.b.metrics.TableRefused.Add(1)
		c.log.Info("subscription refused", "filter", filter, "err", err)
	}
	return rc, err
}

// addReason appends why to the reason string of p.
func addReason(p *packet.Properties, why string) {
	if p.Has(packet.PropReasonString) && p.ReasonString != "" {
		why = p.ReasonString + "; " + why
	}
	p.SetReasonString(why)
}
