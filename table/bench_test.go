package table_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	// Benchmarks run on every engine built into this binary.
	_ "github.com/tidemark-io/tidemark/engine/badger"
	_ "github.com/tidemark-io/tidemark/engine/jetstream"
	_ "github.com/tidemark-io/tidemark/engine/lmdb"
	"github.com/tidemark-io/tidemark/table"
)

func benchDB(b *testing.B, name string) *table.DB {
	b.Helper()
	e, err := engine.Open(context.Background(), name, engine.Options{Dir: b.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		b.Fatalf("open %s: %v", name, err)
	}
	db, err := table.Open(context.Background(), e, table.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = db.Close()
		_ = e.Close()
	})
	return db
}

// fill writes n records to tbl in transactions of size txn, pipelined.
func fill(b *testing.B, db *table.DB, tbl string, n, txn int) {
	b.Helper()
	ctx := context.Background()
	var hs []*engine.Handle
	for i := 0; i < n; i += txn {
		tx := db.Begin()
		for j := i; j < min(n, i+txn); j++ {
			_ = tx.Put(tbl, fmt.Sprintf("id%07d", j), []byte("a value of some thirty-two bytes"))
		}
		h, err := tx.Submit(ctx)
		if err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplay measures catch-up from the start of the log through
// Follow, in events per second, for transactions of 1, 10 and 150 records.
func BenchmarkReplay(b *testing.B) {
	const records = 10000
	for _, name := range engine.Drivers() {
		for _, txn := range []int{1, 10, 150} {
			b.Run(fmt.Sprintf("%s/txn=%d", name, txn), func(b *testing.B) {
				db := benchDB(b, name)
				fill(b, db, "t", records, txn)
				o := table.SubscribeOptions{Table: "t", IncludeSuperseded: true, Hooks: table.Hooks{Live: func() bool { return false }}}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					n := 0
					if _, err := db.Follow(context.Background(), o, func(table.Event) error { n++; return nil }); err != nil {
						b.Fatal(err)
					}
					if n != records {
						b.Fatalf("replayed %d of %d", n, records)
					}
				}
				b.ReportMetric(float64(records*b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkLiveFanout measures the time from submitting one commit to its
// delivery to every one of 1, 100 or 1000 live subscribers (ns/op), with
// the p99 over the run.
func BenchmarkLiveFanout(b *testing.B) {
	for _, name := range engine.Drivers() {
		for _, subs := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("%s/subs=%d", name, subs), func(b *testing.B) {
				db := benchDB(b, name)
				ctx := context.Background()
				start, _ := db.Head(ctx)
				got := make(chan struct{}, subs)
				for i := 0; i < subs; i++ {
					s, err := db.Subscribe(ctx, table.SubscribeOptions{Table: "t", Start: start, IncludeSuperseded: true})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = s.Close() })
					go func() {
						for range s.Events() {
							got <- struct{}{}
						}
					}()
				}
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					begin := time.Now()
					tx := db.Begin()
					_ = tx.Put("t", fmt.Sprintf("k%d", i%100), []byte("v"))
					if _, err := tx.Submit(ctx); err != nil {
						b.Fatal(err)
					}
					for j := 0; j < subs; j++ {
						select {
						case <-got:
						case <-time.After(30 * time.Second):
							b.Fatalf("delivery %d of %d stalled", j, subs)
						}
					}
					lat = append(lat, time.Since(begin))
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			})
		}
	}
}

// BenchmarkQoS2Exchange measures the two commits the broker makes per
// inbound QoS 2 exchange, one after the other as at window 1, at
// SyncNone (ns/op is one exchange; the engines' commit CPU without the
// disk): a staging (ExpectAbsent and PutState) and its release
// (ExpectVersion, DeleteState and a message into the log).
func BenchmarkQoS2Exchange(b *testing.B) {
	for _, name := range engine.Drivers() {
		b.Run(name, func(b *testing.B) {
			db := benchDB(b, name)
			ctx := context.Background()
			msg := make([]byte, 120)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("client\x00%05d", i%65536)
				tx := db.Begin()
				_ = tx.ExpectAbsent("staged", id)
				_ = tx.PutState("staged", id, msg)
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				v := tx.Version()
				tx = db.Begin()
				_ = tx.ExpectVersion("staged", id, v)
				_ = tx.DeleteState("staged", id)
				_ = tx.Message("msgs", "a/topic", msg)
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
