package mqtt_test

import (
	"fmt"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
)

// A retained QoS 0 message reaches a subscriber that subscribes right
// after it was published, on every engine: from the retained store or
// live, never neither. A QoS 0 retained write is not waited for, and on
// engines whose commits become readable only once durable (LMDB,
// JetStream) a SUBSCRIBE a moment later read the store without it, after
// the message's fan-out had passed the new subscription by.
func TestRetainedQoS0SeenBySubscribeEveryEngine(t *testing.T) {
	for _, name := range engine.Drivers() {
		t.Run(name, func(t *testing.T) {
			s := mqtttest.Start(t, name, nil, mqtt.Options{})
			pub := connect3(t, s.Addr, "rq0-pub", true)
			for round := range 8 {
				topic := fmt.Sprintf("rq0/%d/t", round)
				pub.pub(topic, 0, true, fmt.Sprint("v", round))
				sub := connect3(t, s.Addr, fmt.Sprint("rq0-sub", round), true)
				sub.sub(fmt.Sprintf("rq0/%d/#", round), 1)
				sub.expectOne(topic, fmt.Sprint("v", round))
				sub.close()
			}
		})
	}
}
