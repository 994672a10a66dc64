package broker

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// Stats is a snapshot of the broker's counters and gauges.
type Stats struct {
	// ConnectionsOnline and Connects are the open connections and the
	// CONNECTs accepted since start.
	ConnectionsOnline int
	Connects          uint64
	// MessagesIn and MessagesOut count PUBLISHes received and sent, by QoS.
	MessagesIn, MessagesOut [3]uint64
	// BytesIn and BytesOut count application payload bytes.
	BytesIn, BytesOut uint64
	// Dropped counts messages not delivered, by reason: "retention" (an
	// offline session over Options.MaxQueuedMessages or
	// Options.MaxQueuedBytes lost them, one per message; or a session
	// resumed below the truncated log, one per resume), "slow" (an in-memory delivery queue was full), "too_large"
	// (over the client's maximum packet size), "expired" (message expiry
	// passed before delivery), "memory" (a QoS 0 PUBLISH over
	// Options.MaxMemory).
	Dropped map[string]uint64
	// PipelineDepth is the number of acknowledgements waiting for their
	// commit across all connections; InflightOut the QoS 1/2 PUBLISHes
	// sent and not yet acknowledged by clients.
	PipelineDepth, InflightOut int64
	// Truncations counts retention passes that removed log entries.
	Truncations uint64
	// Replays counts subscriptions asking for a replay (docs/replay.md),
	// by result: "started", "refused" (a start that cannot be parsed or
	// is older than the retained log); MessagesReplayed the messages
	// replays sent.
	Replays          map[string]uint64
	MessagesReplayed uint64
	// TableWrites counts PUBLISHes written to a table under
	// Options.TablesPrefix (docs/tables.md), TableDeliveries the records
	// and changes sent to table subscriptions, and TableRefused the
	// PUBLISHes and subscriptions refused there for an invalid table
	// topic or filter.
	TableWrites, TableDeliveries, TableRefused uint64
	// Retention is what each of Options.Retention's rules keeps in the
	// message log, in the order of the rules (zero counts until the
	// broker has located the rules' messages after a start).
	Retention []RetentionStat
	// Sockets is the number of open sockets, with or without a CONNECT;
	// AwaitingConnect those that have not sent one yet.
	Sockets, AwaitingConnect int
	// Refused counts sockets closed before their CONNECT was served, by
	// reason: "max_connections" (at Options.MaxConnections with every
	// socket connected), "evicted" (the oldest socket without a CONNECT,
	// closed to make room for a new one), "rate" (over
	// Options.MaxConnRate), "connect_timeout" (no CONNECT within
	// Options.ConnectTimeout), "closing" (the broker was stopping).
	Refused map[string]uint64
	// AcceptErrors counts failed Accepts, each retried after a pause.
	AcceptErrors uint64
	// StoreFailures counts commits the store refused because it could
	// not write (a full disk, a failing write: engine.ErrWriteFailed);
	// each ended the connection that needed it, unacknowledged.
	StoreFailures uint64
	// LimitHits counts what a configured limit refused, by limit:
	// "topic_length" and "topic_levels" (a PUBLISH topic or a filter),
	// "subscriptions" (a subscription past the per-session cap), "memory"
	// (a PUBLISH over Options.MaxMemory), "publish_rate" (a PUBLISH held
	// back by Options.MaxPublishRate), "retained" (a retained PUBLISH
	// published but not retained, past Options.MaxRetained),
	// "inflight_bytes" (a session waiting for acknowledgements to free
	// room under Options.MaxInflightBytes, once per wait), "queued_bytes"
	// (an offline session's message dropped by Options.MaxQueuedBytes,
	// one per message).
	LimitHits map[string]uint64
	// AuthRefused counts refused CONNECTs by reason: "bad_credentials",
	// "not_authorized" (anonymous, client id or will topic not allowed),
	// "busy" (no authentication slot in time), "error".
	AuthRefused map[string]uint64
	// Denied counts what the Authorizer refused, by access: "read",
	// "write", "subscribe".
	Denied map[string]uint64
}

// Stats returns the broker's counters (mqtt.Broker.Stats).
func (b *Broker) Stats() Stats {
	m := &b.metrics
	b.mu.Lock()
	online := len(b.conns)
	b.mu.Unlock()
	s := Stats{
		ConnectionsOnline: online, Connects: m.Connects.Load(),
		BytesIn: m.BytesIn.Load(), BytesOut: m.BytesOut.Load(),
		PipelineDepth: m.PipelineDepth.Load(), InflightOut: m.InflightOut.Load(),
		Truncations:      m.Truncations.Load(),
		Replays:          map[string]uint64{"started": m.ReplaysStarted.Load(), "refused": m.ReplaysRefused.Load()},
		MessagesReplayed: m.MsgsReplayed.Load(),
		TableWrites:      m.TableWrites.Load(), TableDeliveries: m.TableDelivered.Load(), TableRefused: m.TableRefused.Load(),
		Retention: b.rules.Stats(time.Now()),
		Dropped: map[string]uint64{
			"retention": m.DroppedRetention.Load(), "slow": m.DroppedSlow.Load(),
			"too_large": m.DroppedTooLarge.Load(), "expired": m.DroppedExpired.Load(),
			"memory": m.DroppedMemory.Load(),
		},
	}
	s.Sockets, s.AwaitingConnect = b.gate.Counts()
	s.Refused = map[string]uint64{
		counters.RefusedCap: m.RefusedCap.Load(), counters.RefusedEvicted: m.RefusedEvicted.Load(), counters.RefusedRate: m.RefusedRate.Load(),
		counters.RefusedTimeout: m.RefusedTimeout.Load(), counters.RefusedClosing: m.RefusedClosing.Load(),
	}
	s.AcceptErrors = m.AcceptErrors.Load()
	s.StoreFailures = m.StoreFailures.Load()
	s.LimitHits = map[string]uint64{
		limitTopicLength: m.LimitTopicLength.Load(), limitTopicLevels: m.LimitTopicLevels.Load(),
		limitSubscriptions: m.LimitSubscriptions.Load(), limitMemory: m.LimitMemory.Load(),
		limitPublishRate: m.LimitPublishRate.Load(), limitRetained: m.LimitRetained.Load(),
		limitInflightBytes: m.LimitInflightBytes.Load(), limitQueuedBytes: m.LimitQueuedBytes.Load(),
	}
	for i := range 3 {
		s.MessagesIn[i], s.MessagesOut[i] = m.MsgsIn[i].Load(), m.MsgsOut[i].Load()
	}
	s.AuthRefused = make(map[string]uint64, counters.NAuthReasons)
	for i, name := range counters.AuthReasonNames {
		s.AuthRefused[name] = m.AuthRefused[i].Load()
	}
	s.Denied = map[string]uint64{"read": m.Denied[0].Load(), "write": m.Denied[1].Load(), "subscribe": m.Denied[2].Load()}
	return s
}

// SessionCounts counts the stored sessions online and offline
// (mqtt.Broker.SessionCounts).
func (b *Broker) SessionCounts(ctx context.Context) (online, offline int, err error) {
	b.mu.Lock()
	online = len(b.conns)
	b.mu.Unlock()
	total := 0
	err = b.db.Range(ctx, session.Table, "", func(r table.Record) bool {
		if !r.Deleted {
			total++
		}
		return true
	})
	return online, max(total-online, 0), err
}
