package main

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark-io/tidemark/engine"
)

// TestInstrumentObservesEveryCommit: the commit latency histogram counts
// every commit, those complete when Submit returns (no sync to wait for,
// observed at once) and those that wait for their sync (observed by the
// wrapper's goroutine).
func TestInstrumentObservesEveryCommit(t *testing.T) {
	count := func() uint64 {
		var m dto.Metric
		if err := commitLatency.WithLabelValues("pebble").(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	for _, sync := range []engine.SyncMode{engine.SyncNone, engine.SyncAlways} {
		t.Run(sync.String(), func(t *testing.T) {
			ctx := t.Context()
			raw, err := engine.Open(ctx, "pebble", engine.Options{Dir: t.TempDir(), Sync: sync})
			if err != nil {
				t.Fatal(err)
			}
			e := instrument(raw)
			defer e.Close()
			before := count()
			const n = 50
			var last *engine.Handle
			for i := range n {
				b := new(engine.Batch).Put([]byte(fmt.Sprint("k", i)), []byte("v"))
				if last, err = e.Submit(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := last.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			// The wrapper's goroutine observes a commit after its handle
			// completes: wait for it to catch up, a bounded while.
			for i := 0; count()-before < n && i < 500; i++ {
				if i > 0 {
					time.Sleep(2 * time.Millisecond)
				}
			}
			if got := count() - before; got != n {
				t.Fatalf("%d commits observed, want %d", got, n)
			}
		})
	}
}
