//go:build !nopebble

package pebble

import (
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
)

// TestLogStatsToldMatchRead: see enginetest.LogStatsToldMatchRead.
func TestLogStatsToldMatchRead(t *testing.T) {
	enginetest.LogStatsToldMatchRead(t, open, func(e driver.Engine) { e.(*db).stats.Reset() })
}
