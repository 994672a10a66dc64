package mqtt

import (
	"log/slog"
	"time"
)

// Options configures a Broker. Zero values take the documented defaults.
type Options struct {
	// Logger receives the broker's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Hooks are fault-injection points for tests; nil in production.
	Hooks Hooks
	// NodeID names this broker among brokers that share one store (one
	// JetStream stream, or one table.DB). When set, it must be unique
	// among them: a CONNECT whose client id is online on another node
	// then takes the session over across nodes (see takeover.go), and a
	// broker recovers at startup only the sessions its own node left
	// online. Empty (the default) is a broker alone on its store.
	NodeID string
	// TakeoverTimeout bounds how long a CONNECT waits for another node to
	// hand its session over (default 5 s); a node that does not answer is
	// passed over.
	TakeoverTimeout time.Duration
	// ReceiveMaximum is the number of unacknowledged QoS 1 and 2 PUBLISHes
	// a client may send (advertised in 5.0, enforced as back-pressure in
	// 3.1.1): the depth of each connection's ack pipeline. Default 1024.
	ReceiveMaximum int
	// MaxInflight is the number of QoS 1 and 2 PUBLISHes the broker sends
	// a client before it waits for their acknowledgements (default 4096):
	// a 5.0 client's receive maximum lowers it. It bounds what a session
	// holds for messages in flight, in memory and in its stored record.
	MaxInflight int
	// MaxInflightBytes bounds the payload bytes of the QoS 1 and 2
	// PUBLISHes the broker has sent a client and not had acknowledged
	// (default 0: no bound but MaxInflight's). It is flow control, like
	// MaxInflight: while the bytes in flight are at or over it the broker
	// sends that client no further QoS 1 or 2 PUBLISH, and goes on, in log
	// order, as acknowledgements free room; nothing is dropped. A PUBLISH
	// larger than it still goes, alone, as mosquitto's max_inflight_bytes
	// does. Each time a session waits for room counts in
	// Stats.LimitHits["inflight_bytes"].
	MaxInflightBytes int64
	// MaxPacketSize bounds an inbound packet (default 1 MiB, at most
	// MaxPacketSizeLimit); 5.0 clients are told in CONNACK.
	MaxPacketSize int
	// TopicAliasMaximum is the number of inbound topic aliases a 5.0 client
	// may use (default 64).
	TopicAliasMaximum int
	// StoreTimeout fails a connection whose oldest pending commit has not
	// completed in this time; the client re-sends after reconnecting.
	// Default 30 s.
	StoreTimeout time.Duration
	// MaxSessionExpiry caps the session expiry a 5.0 client asks for
	// (default: no cap).
	MaxSessionExpiry time.Duration
	// SessionExpiry is the longest any session is kept after its
	// connection ends: a 5.0 client asking for more, or for never, gets
	// this, and so does a 3.1.1 persistent session, which cannot ask.
	// Default DefaultSessionExpiry, so that a session whose client never
	// returns stops holding the message log (see MaxQueuedMessages) after
	// it; negative: no bound, 3.1.1 persistent sessions never expire. It
	// applies to a session from its next connection on.
	SessionExpiry time.Duration

	// MaxConnections caps the open sockets, with or without a CONNECT.
	// At the cap a new socket takes the place of the oldest one that has
	// not sent its CONNECT; when every socket has, the new one is closed
	// at once. Default: DefaultMaxConnections().
	MaxConnections int
	// MaxConnRate is how many sockets per second one source address may
	// open (a burst of one second's worth); past it new sockets are
	// closed at once. Default 0: no limit (clients behind one NAT or load
	// balancer share an address).
	MaxConnRate float64
	// ConnectTimeout closes a socket that has not sent its CONNECT in
	// this time (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// MaxTopicLength bounds topic names and filters, in bytes (default
	// and maximum MaxTopicLength, the protocol's own limit).
	MaxTopicLength int
	// MaxTopicLevels bounds the levels of topic names and filters
	// (default 0: no limit).
	MaxTopicLevels int
	// MaxSubscriptions bounds the subscriptions of one session (default
	// 0: no limit).
	MaxSubscriptions int
	// CheckpointEvery is how long an online session may hold deliveries it
	// completed before it persists its acknowledged checkpoint
	// (DefaultCheckpointEvery). A window's worth of them (at most 256) is
	// persisted at once whatever the period, so after a crash a session
	// is re-sent no more than that; the period sets how many checkpoint
	// commits a fleet with sparse traffic pays, one per session and
	// period at most. It is also persisted on disconnect and on every
	// subscription change.
	CheckpointEvery time.Duration
	// KeepAliveGrace multiplies the client's keep alive before a silent
	// connection is closed (the spec's 1.5 by default).
	KeepAliveGrace float64
	// MaxQueuedMessages caps how many of its own messages an offline
	// session may hold: QoS 1/2 messages in the log after its checkpoint
	// that its plain (not shared) subscriptions of QoS 1 or 2 match.
	// Messages of other topics do not count. Past it, each retention pass
	// drops the session's oldest, so it keeps exactly the newest
	// MaxQueuedMessages of them, counted as dropped with reason
	// "retention"; a session further behind than that in the log but not
	// in its own messages has its checkpoint moved up to its oldest one,
	// losing nothing. Either way an offline session holds the log from
	// its oldest kept message only. Online sessions are not cut, nor one
	// whose delayed will is still to be published. Default
	// DefaultMaxQueuedMessages; negative: no cap, the log is kept until
	// every session has acknowledged it or expired (SessionExpiry). See
	// Broker.Retain.
	MaxQueuedMessages int
	// MaxQueuedBytes caps the payload bytes of an offline session's own
	// messages, counted as MaxQueuedMessages counts them (default 0: no
	// cap). Past it, each retention pass drops the session's oldest, so
	// it keeps the newest of them whose payloads fit, counted as dropped
	// with reason "retention" and in Stats.LimitHits["queued_bytes"]. With
	// both caps an offline session keeps the newest messages that fit
	// both. A message larger than the cap alone is dropped too: its
	// session keeps none.
	MaxQueuedBytes int64
	// RetentionEvery is the period of retention passes (default 10 s).
	RetentionEvery time.Duration
	// RouteQueue is how many log messages the router may queue for one
	// online session before that session leaves the route and reads the
	// log on its own until it has caught up (default 1024). It bounds a
	// slow subscriber's memory without holding up any other.
	RouteQueue int
	// History keeps at least this much of the message log for replay on
	// subscribe (docs/replay.md): retention removes no message younger
	// than it, whatever the sessions' checkpoints. Default 0: a message is
	// kept only until every session has it. After a restart the broker
	// truncates nothing for History, since it does not know the times of
	// the positions retained before it started.
	History time.Duration
	// TablesPrefix maps the topics under it onto the records of the
	// broker's table.DB (docs/tables.md): <prefix><table>/<id> is record
	// <id> of table <table>. A retained PUBLISH there writes the record
	// (an empty payload deletes it) instead of the message log, and a
	// subscription to <prefix><table>/# receives the current records and
	// then every change, also those an application makes through package
	// table. It must be a topic name without wildcards; a missing final
	// "/" is added. Default "": off, every topic is an ordinary one.
	TablesPrefix string
	// Retention keeps, per topic filter, at least the messages a rule
	// names (by age, count or size) in the message log, whatever the
	// sessions have received (see mqtt/internal/retention and
	// docs/replay.md); ParseRetention reads them from text. The log is
	// cut below the oldest message any rule, session or History needs.
	// After a restart nothing is removed until the broker has read the
	// retained log once to locate the rules' messages.
	Retention []RetentionRule

	// Authenticator decides who a connecting client is (see access.go);
	// nil accepts every client as the user name it presents.
	Authenticator Authenticator
	// Authorizer decides what a client may publish, subscribe to and
	// receive; nil allows everything.
	Authorizer Authorizer
	// AuthConcurrency bounds the Authenticate calls running at once
	// (default: half the CPUs, at least 1); a CONNECT that finds no slot
	// in 5 s is refused as "server busy".
	AuthConcurrency int
	// AuthFailureDelay is the least time a refused CONNECT waits for its
	// CONNACK, counted from the start of the attempt (default 1 s;
	// negative: none).
	AuthFailureDelay time.Duration
	// MaxMemory is the global memory budget in bytes (0: none): while the
	// Go heap's live objects exceed it, new publishes are refused before
	// they are stored (QoS 0 dropped; QoS 1 and 2 answered with Quota
	// exceeded, 0x97, on 5.0; the connection closed on 3.1.1), so queued
	// data cannot grow the process past it by much. Deliveries go on. A
	// process embedding the broker should also set a Go memory limit
	// (runtime/debug.SetMemoryLimit) near it, so garbage does not count
	// as queued data; tidemark serve does.
	MaxMemory int64
	// MaxPublishRate is how many PUBLISHes per second one connection may
	// send (0: no limit), with bursts of up to a second's worth. Past it
	// the broker reads that connection's next PUBLISH only when the rate
	// allows, so the client is slowed by TCP flow control rather than
	// refused or disconnected; each PUBLISH held back counts in
	// Stats.LimitHits["publish_rate"].
	MaxPublishRate float64
	// MaxRetained bounds the retained messages kept (0: no limit). Past
	// it a retained PUBLISH to a topic that has none is still published
	// but not retained (counted in Stats.LimitHits["retained"]); one that
	// replaces or deletes a retained message always goes through. The
	// count is the store's at start plus this node's own changes.
	MaxRetained int
	// MaxKeepAlive caps the keep alive a client may use (0: no cap). A
	// 5.0 client asking for more, or for none, is told the cap in the
	// CONNACK's Server Keep Alive; a 3.1.1 client, which cannot be told,
	// is refused ("identifier rejected"), as mosquitto does.
	MaxKeepAlive time.Duration
}
