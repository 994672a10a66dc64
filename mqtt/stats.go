package mqtt

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
	// Options.MaxMemory), "no_member" (a shared subscription's message a
	// leaving member held, unsent or unacknowledged, with no other member
	// online on the node to take it and no persistent member to keep it
	// for, or one in a group's queue when the group's last stored member
	// went), "shared_queue" (a shared group with no member online had
	// Options.MaxQueuedMessages messages queued already).
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
	// SharedQueued counts the messages this node kept in a shared
	// subscription group's queue while none of the group's members was
	// online (the first member back receives them).
	SharedQueued uint64
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
