package broker

import (
	"context"
	"time"

	"github.com/tidemark-io/tidemark/mqtt/internal/counters"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/table"
)

// Stats are the broker's counters: the fields of mqtt.Stats, which
// documents them, in the same order, so that either converts to the
// other.
type Stats struct {
	ConnectionsOnline                          int
	Connects                                   uint64
	MessagesIn, MessagesOut                    [3]uint64
	BytesIn, BytesOut                          uint64
	Dropped                                    map[string]uint64
	PipelineDepth, InflightOut                 int64
	Truncations                                uint64
	Replays                                    map[string]uint64
	MessagesReplayed                           uint64
	SharedQueued                               uint64
	TableWrites, TableDeliveries, TableRefused uint64
	Retention                                  []RetentionStat
	Sockets, AwaitingConnect                   int
	Refused                                    map[string]uint64
	AcceptErrors                               uint64
	StoreFailures                              uint64
	LimitHits                                  map[string]uint64
	AuthRefused                                map[string]uint64
	Denied                                     map[string]uint64
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
		SharedQueued:     m.SharedQueued.Load(),
		TableWrites:      m.TableWrites.Load(), TableDeliveries: m.TableDelivered.Load(), TableRefused: m.TableRefused.Load(),
		Retention: b.rules.Stats(time.Now()),
		Dropped: map[string]uint64{
			"retention": m.DroppedRetention.Load(), "slow": m.DroppedSlow.Load(),
			"too_large": m.DroppedTooLarge.Load(), "expired": m.DroppedExpired.Load(),
			"memory": m.DroppedMemory.Load(), "no_member": m.DroppedNoMember.Load(),
			"shared_queue": m.DroppedSharedQueue.Load(),
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
	err = b.rangeAll(ctx, session.Table, "", func(_ int, r table.Record) bool {
		if !r.Deleted {
			total++
		}
		return true
	})
	return online, max(total-online, 0), err
}
