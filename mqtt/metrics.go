package mqtt

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// metrics are the broker's counters; Stats reads them.
type metrics struct {
	connects         atomic.Uint64
	msgsIn           [3]atomic.Uint64
	msgsOut          [3]atomic.Uint64
	bytesIn          atomic.Uint64
	bytesOut         atomic.Uint64
	droppedRetention atomic.Uint64
	droppedSlow      atomic.Uint64
	droppedTooLarge  atomic.Uint64
	droppedExpired   atomic.Uint64
	truncations      atomic.Uint64
	replaysStarted   atomic.Uint64
	replaysRefused   atomic.Uint64
	msgsReplayed     atomic.Uint64
	tableWrites      atomic.Uint64
	tableDelivered   atomic.Uint64
	tableRefused     atomic.Uint64
	pipelineDepth    atomic.Int64
	inflightOut      atomic.Int64

	// Sockets closed before their CONNECT was served, by reason (see
	// accept.go), and failed Accepts.
	refusedCap, refusedEvicted, refusedRate, refusedTimeout, refusedClosing atomic.Uint64
	acceptErrors                                                            atomic.Uint64
	// Commits the store refused with engine.ErrWriteFailed.
	storeFailures atomic.Uint64
	// Packets or subscriptions refused by a configured limit.
	limitTopicLength, limitTopicLevels, limitSubscriptions atomic.Uint64
	limitMemory, droppedMemory                             atomic.Uint64
	limitPublishRate, limitRetained                        atomic.Uint64
	limitInflightBytes, limitQueuedBytes                   atomic.Uint64
	authRefused                                            [nRefused]atomic.Uint64
	denied                                                 [3]atomic.Uint64 // read, write, subscribe
}

func (m *metrics) refused(reason string) {
	switch reason {
	case refusedCap:
		m.refusedCap.Add(1)
	case refusedEvicted:
		m.refusedEvicted.Add(1)
	case refusedRate:
		m.refusedRate.Add(1)
	case refusedTimeout:
		m.refusedTimeout.Add(1)
	case refusedClosing:
		m.refusedClosing.Add(1)
	}
}

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

// Stats returns the broker's current counters.
func (b *Broker) Stats() Stats {
	m := &b.metrics
	b.mu.Lock()
	online := len(b.conns)
	b.mu.Unlock()
	s := Stats{
		ConnectionsOnline: online, Connects: m.connects.Load(),
		BytesIn: m.bytesIn.Load(), BytesOut: m.bytesOut.Load(),
		PipelineDepth: m.pipelineDepth.Load(), InflightOut: m.inflightOut.Load(),
		Truncations:      m.truncations.Load(),
		Replays:          map[string]uint64{"started": m.replaysStarted.Load(), "refused": m.replaysRefused.Load()},
		MessagesReplayed: m.msgsReplayed.Load(),
		TableWrites:      m.tableWrites.Load(), TableDeliveries: m.tableDelivered.Load(), TableRefused: m.tableRefused.Load(),
		Retention: b.rules.Stats(time.Now()),
		Dropped: map[string]uint64{
			"retention": m.droppedRetention.Load(), "slow": m.droppedSlow.Load(),
			"too_large": m.droppedTooLarge.Load(), "expired": m.droppedExpired.Load(),
			"memory": m.droppedMemory.Load(),
		},
	}
	s.Sockets, s.AwaitingConnect = b.gate.counts()
	s.Refused = map[string]uint64{
		refusedCap: m.refusedCap.Load(), refusedEvicted: m.refusedEvicted.Load(), refusedRate: m.refusedRate.Load(),
		refusedTimeout: m.refusedTimeout.Load(), refusedClosing: m.refusedClosing.Load(),
	}
	s.AcceptErrors = m.acceptErrors.Load()
	s.StoreFailures = m.storeFailures.Load()
	s.LimitHits = map[string]uint64{
		limitTopicLength: m.limitTopicLength.Load(), limitTopicLevels: m.limitTopicLevels.Load(),
		limitSubscriptions: m.limitSubscriptions.Load(), limitMemory: m.limitMemory.Load(),
		limitPublishRate: m.limitPublishRate.Load(), limitRetained: m.limitRetained.Load(),
		limitInflightBytes: m.limitInflightBytes.Load(), limitQueuedBytes: m.limitQueuedBytes.Load(),
	}
	for i := range 3 {
		s.MessagesIn[i], s.MessagesOut[i] = m.msgsIn[i].Load(), m.msgsOut[i].Load()
	}
	s.AuthRefused = make(map[string]uint64, nRefused)
	for i, name := range refusedNames {
		s.AuthRefused[name] = m.authRefused[i].Load()
	}
	s.Denied = map[string]uint64{"read": m.denied[0].Load(), "write": m.denied[1].Load(), "subscribe": m.denied[2].Load()}
	return s
}

// storeFailed counts err if it is the store refusing writes, and says so.
func (m *metrics) storeFailed(err error) bool {
	if errors.Is(err, engine.ErrWriteFailed) {
		m.storeFailures.Add(1)
		return true
	}
	return false
}

// SessionCounts returns the number of stored sessions with and without a
// connection.
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
