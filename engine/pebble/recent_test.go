//go:build !nopebble

package pebble

import (
	"context"
	"testing"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/enginetest"
)

// Scans answered from the latest commits held in memory return what the
// store holds.
func TestRecentScans(t *testing.T) {
	for _, mode := range []driver.SyncMode{driver.SyncNone, driver.SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			e, err := open(context.Background(), driver.Options{Dir: t.TempDir(), Sync: mode})
			if err != nil {
				t.Fatal(err)
			}
			d := e.(*db)
			defer d.Close()
			enginetest.CheckRecentScans(t, d, &d.recent, func() {
				d.mu.Lock()
				d.recent.Reset()
				d.mu.Unlock()
			})
		})
	}
}
