package mqtt

import (
	"github.com/tidemark-io/tidemark/mqtt/auth"
	"github.com/tidemark-io/tidemark/mqtt/internal/broker"
)

// The broker's fault-injection hooks for tests, documented where they are
// declared, in package mqtt/internal/broker.
type (
	// Hooks are fault-injection points for tests, called only in a build
	// with tag faults (HooksEnabled); nil in production.
	Hooks = broker.Hooks
	// Point names a point of a QoS exchange that Hooks.At reports.
	Point = broker.Point
	// Kind names the kind of commit Hooks.Submit and Hooks.Ack see.
	Kind = broker.Kind
)

// HooksEnabled reports whether this build calls Options.Hooks, which
// only the tests' builds (tag faults) do.
const HooksEnabled = broker.HooksEnabled

// The points of an exchange Hooks.At reports.
const (
	PointStagedLoad       = broker.PointStagedLoad
	PointPubrecSent       = broker.PointPubrecSent
	PointPubrelRead       = broker.PointPubrelRead
	PointReleaseCommitted = broker.PointReleaseCommitted
	PointPubcompSent      = broker.PointPubcompSent
	PointDelivered        = broker.PointDelivered
	PointSessionRead      = broker.PointSessionRead
)

// The kinds of commit Hooks.Submit and Hooks.Ack see.
const (
	KindPublish    = broker.KindPublish
	KindStage      = broker.KindStage
	KindRelease    = broker.KindRelease
	KindSession    = broker.KindSession
	KindCheckpoint = broker.KindCheckpoint
	KindQueueCut   = broker.KindQueueCut
)

// Access control: what a Broker asks of Options.Authenticator and
// Options.Authorizer, documented in package mqtt/auth (whose Files
// implements both over a password and an ACL file).
type (
	// ConnInfo is what a client presents when it connects.
	ConnInfo = auth.ConnInfo
	// Identity is who a connection is once authenticated.
	Identity = auth.Identity
	// Access is what an Authorizer is asked to allow on a topic.
	Access = auth.Access
	// Authenticator decides who a connecting client is.
	Authenticator = auth.Authenticator
	// Authorizer decides what an identity may do on a topic.
	Authorizer = auth.Authorizer
	// ClientIDAuthorizer is an Authorizer that also decides which client
	// ids an identity may use.
	ClientIDAuthorizer = auth.ClientIDAuthorizer
)

// The accesses an Authorizer is asked about.
const (
	AccessRead      = auth.AccessRead
	AccessWrite     = auth.AccessWrite
	AccessSubscribe = auth.AccessSubscribe
)

// Errors an Authenticator wraps to refuse a client.
var (
	// ErrBadCredentials refuses a wrong user name or password: 5.0 0x86,
	// 3.1.1 return code 4.
	ErrBadCredentials = auth.ErrBadCredentials
	// ErrNotAuthorized refuses a client that may not connect: 5.0 0x87,
	// 3.1.1 return code 5.
	ErrNotAuthorized = auth.ErrNotAuthorized
)

// Errors of Publish, Subscribe and the options.
var (
	// ErrInvalidTopic reports a topic name or filter that is not valid MQTT.
	ErrInvalidTopic = broker.ErrInvalidTopic
	// ErrTopicLimit reports a topic over Options.MaxTopicLength or
	// Options.MaxTopicLevels.
	ErrTopicLimit = broker.ErrTopicLimit
	// ErrTableTopic reports a topic or filter under Options.TablesPrefix
	// that names no record or table the broker may use.
	ErrTableTopic = broker.ErrTableTopic
	// ErrReplayFrom reports a replay start that cannot be parsed.
	ErrReplayFrom = broker.ErrReplayFrom
	// ErrReplayTruncated reports a replay start older than the retained
	// log.
	ErrReplayTruncated = broker.ErrReplayTruncated
)

// Replay on subscribe (docs/replay.md).
const (
	// PropReplayFrom is the user property of a 5.0 SUBSCRIBE asking its
	// subscriptions to replay the message log from a point.
	PropReplayFrom = broker.PropReplayFrom
	// PropPosition is the user property carrying a delivered message's
	// log position on the deliveries of a replaying subscription.
	PropPosition = broker.PropPosition
	// PropOldestPosition is the user property of a SUBACK refusing a
	// replay older than the retained log.
	PropOldestPosition = broker.PropOldestPosition
	// ReplayPrefix is the topic-filter prefix asking for a replay where
	// there are no user properties (3.1.1): "$replay/<from>/<filter>".
	ReplayPrefix = broker.ReplayPrefix
)

// Defaults and bounds of the options.
const (
	DefaultCheckpointEvery   = broker.DefaultCheckpointEvery
	DefaultConnectTimeout    = broker.DefaultConnectTimeout
	DefaultMaxQueuedMessages = broker.DefaultMaxQueuedMessages
	DefaultSessionExpiry     = broker.DefaultSessionExpiry
	MaxTopicLength           = broker.MaxTopicLength
	MaxPacketSizeLimit       = broker.MaxPacketSizeLimit
)

// DefaultMaxConnections is the default of Options.MaxConnections: what
// the process's open-file limit leaves room for.
func DefaultMaxConnections() int { return broker.DefaultMaxConnections() }
