//go:build nojetstream

package mqttbench

import (
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// natsOmitted says why the nats peer is missing: it embeds nats-server,
// which a build that leaves the JetStream engine out leaves out as well.
const natsOmitted = "the nats peer embeds nats-server, which this build left out (tag nojetstream)"

// natsTarget is never called in this build: Peer checks natsOmitted first.
func natsTarget(engine.SyncMode, time.Duration) Target { return Target{} }
