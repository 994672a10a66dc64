//go:build !nojetstream

package jetstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// BenchmarkQoS2Pattern drives the commits one MQTT QoS 2 exchange costs
// the broker, straight at the engine (embedded server, sync interval):
// window goroutines each stage a record (an ExpectAbsent check and two
// puts), wait for it, then release it (a check on its version, two
// deletes and a log entry) and wait again, as a publisher with that many
// exchanges in flight drives them. With sub set, as many goroutines also
// write and delete outbound state without checks, the way the broker
// records deliveries to a QoS 2 subscriber. It reports exchanges/s.
func BenchmarkQoS2Pattern(b *testing.B) {
	for _, window := range []int{1, 16, 256} {
		for _, sub := range []bool{false, true} {
			name := fmt.Sprintf("w%d", window)
			if sub {
				name += "-sub"
			}
			b.Run(name, func(b *testing.B) { runQoS2Pattern(b, window, sub) })
		}
	}
}

func runQoS2Pattern(b *testing.B, window int, sub bool) {
	e, err := engine.Open(b.Context(), "jetstream", engine.Options{Dir: b.TempDir(), Sync: engine.SyncInterval})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	val := make([]byte, 120)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*window)
	run := func(f func(w int) error) {
		for w := 0; w < window; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f(w); err != nil {
					errs <- err
				}
			}()
		}
	}
	n := int64(b.N)
	start := time.Now()
	run(func(w int) error {
		rec, ver := []byte(fmt.Sprintf("r/staged/%04d", w)), []byte(fmt.Sprintf("v/staged/%04d", w))
		for i := 0; next.Add(1) <= n; i++ {
			v := []byte(fmt.Sprintf("%016d", i))
			stage := new(engine.Batch).ExpectAbsent(ver).Put(rec, val).Put(ver, v)
			if _, err := engine.Commit(ctx, e, stage); err != nil {
				return fmt.Errorf("stage: %w", err)
			}
			release := new(engine.Batch).Expect(ver, v).Delete(rec).Delete(ver).Append(val)
			if _, err := engine.Commit(ctx, e, release); err != nil {
				return fmt.Errorf("release: %w", err)
			}
		}
		return nil
	})
	var stop atomic.Bool
	var subWG sync.WaitGroup
	if sub {
		for w := 0; w < window; w++ {
			subWG.Add(1)
			go func() {
				defer subWG.Done()
				rec, ver := []byte(fmt.Sprintf("r/out/%04d", w)), []byte(fmt.Sprintf("v/out/%04d", w))
				for i := 0; !stop.Load(); i++ {
					v := []byte(fmt.Sprintf("%016d", i))
					put := new(engine.Batch).Put(rec, val).Put(ver, v)
					if _, err := engine.Commit(ctx, e, put); err != nil {
						errs <- err
						return
					}
					del := new(engine.Batch).Delete(rec).Delete(ver)
					if _, err := engine.Commit(ctx, e, del); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop.Store(true)
	subWG.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "exchanges/s")
	b.ReportMetric(0, "ns/op")
}
