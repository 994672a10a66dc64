package mqtt_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

// TestLargeDeliveryAfterQuietSpell: a PUBLISH larger than the write buffer,
// sent after the connection was quiet for longer than the store timeout,
// reaches the client (the write deadline is re-armed for it, not left
// where the last flush put it).
func TestLargeDeliveryAfterQuietSpell(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.StoreTimeout = 200 * time.Millisecond })
	sub := connect5(t, s.Addr, "quiet-sub", true, 0)
	sub.sub("quiet/#", 1)
	pub := connect5(t, s.Addr, "quiet-pub", true, 0)
	pub.pub("quiet/small", 1, false, "small")
	sub.expectOne("quiet/small", "small")
	time.Sleep(600 * time.Millisecond)
	big := strings.Repeat("x", 256<<10)
	pub.pub("quiet/big", 1, false, big)
	sub.expectOne("quiet/big", big)
}
