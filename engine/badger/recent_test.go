//go:build !nobadger

package badger

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// Scans answered from the latest commits held in memory return what the
// store holds.
func TestRecentScans(t *testing.T) {
	enginetest.RecentScans(t, func(dir string, mode driver.SyncMode) (driver.Engine, *kvlog.Recent, func()) {
		e, err := open(context.Background(), driver.Options{Dir: dir, Sync: mode})
		if err != nil {
			t.Fatal(err)
		}
		d := e.(*db)
		return d, &d.recent, func() { d.groupMu.Lock(); d.recent.Reset(); d.groupMu.Unlock() }
	})
}
