// Package counters holds the broker's counters and gauges: one set per
// broker, written by whatever part of it counts an event and read whole
// into the broker's Stats. Every field is safe for concurrent use.
package counters

import (
	"errors"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/engine"
)

// Reasons a socket is closed before its CONNECT was served, as Refused
// counts them and Stats names them.
const (
	RefusedCap     = "max_connections" // at the cap with every socket connected
	RefusedEvicted = "evicted"         // the oldest socket without CONNECT, closed to make room
	RefusedRate    = "rate"            // its source address opened sockets faster than the rate limit
	RefusedTimeout = "connect_timeout" // no CONNECT within the timeout
	RefusedClosing = "closing"         // the broker was stopping
)

// Reasons an authentication is refused, as indexes of AuthRefused.
const (
	AuthBadCredentials = iota // bad user name or password
	AuthNotAuthorized         // anonymous, client id or will not allowed
	AuthBusy                  // no hashing slot in time
	AuthError                 // the authenticator failed
	NAuthReasons
)

// AuthReasonNames names the reasons of AuthRefused, by index.
var AuthReasonNames = [NAuthReasons]string{"bad_credentials", "not_authorized", "busy", "error"}

// Counters are the broker's counters (monotonic) and gauges (Int64s that
// go up and down).
type Counters struct {
	Connects         atomic.Uint64
	MsgsIn           [3]atomic.Uint64 // PUBLISHes received, by QoS
	MsgsOut          [3]atomic.Uint64 // PUBLISHes sent, by QoS
	BytesIn          atomic.Uint64    // payload bytes received
	BytesOut         atomic.Uint64    // payload bytes sent
	DroppedRetention atomic.Uint64
	DroppedSlow      atomic.Uint64
	DroppedNoMember  atomic.Uint64
	DroppedTooLarge  atomic.Uint64
	DroppedExpired   atomic.Uint64
	// SharedQueued counts the messages this node put in a shared
	// group's queue while none of its members was online.
	SharedQueued atomic.Uint64
	// DroppedSharedQueue counts the messages a shared group's full
	// queue did not take.
	DroppedSharedQueue atomic.Uint64
	Truncations        atomic.Uint64
	ReplaysStarted     atomic.Uint64
	ReplaysRefused     atomic.Uint64
	MsgsReplayed       atomic.Uint64
	TableWrites        atomic.Uint64
	TableDelivered     atomic.Uint64
	TableRefused       atomic.Uint64
	PipelineDepth      atomic.Int64 // acknowledgements waiting for their commit
	InflightOut        atomic.Int64 // QoS 1/2 PUBLISHes sent, not yet acknowledged

	// Sockets closed before their CONNECT was served, by reason (see
	// Refused), and failed Accepts.
	RefusedCap, RefusedEvicted, RefusedRate, RefusedTimeout, RefusedClosing atomic.Uint64
	AcceptErrors                                                            atomic.Uint64
	// Commits the store refused with engine.ErrWriteFailed.
	StoreFailures atomic.Uint64
	// Packets or subscriptions refused by a configured limit.
	LimitTopicLength, LimitTopicLevels, LimitSubscriptions atomic.Uint64
	LimitMemory, DroppedMemory                             atomic.Uint64
	LimitPublishRate, LimitRetained                        atomic.Uint64
	LimitInflightBytes, LimitQueuedBytes                   atomic.Uint64
	AuthRefused                                            [NAuthReasons]atomic.Uint64
	Denied                                                 [3]atomic.Uint64 // read, write, subscribe
}

// Refused counts a socket closed before its CONNECT for reason, one of
// the Refused constants; another reason is not counted.
func (m *Counters) Refused(reason string) {
	switch reason {
	case RefusedCap:
		m.RefusedCap.Add(1)
	case RefusedEvicted:
		m.RefusedEvicted.Add(1)
	case RefusedRate:
		m.RefusedRate.Add(1)
	case RefusedTimeout:
		m.RefusedTimeout.Add(1)
	case RefusedClosing:
		m.RefusedClosing.Add(1)
	}
}

// StoreFailed counts err if it is the store refusing writes
// (engine.ErrWriteFailed), and says so.
func (m *Counters) StoreFailed(err error) bool {
	if errors.Is(err, engine.ErrWriteFailed) {
		m.StoreFailures.Add(1)
		return true
	}
	return false
}
