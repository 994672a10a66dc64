package benchtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// Reopen memory load: as many values as a broker holding 50,000 retained
// messages of 1 KB.
const (
	reopenKeys     = 50_000
	reopenValue    = 1024
	reopenPerBatch = 500
)

// ReopenMemory measures what an engine holds in memory for its data: each
// iteration writes 50,000 values of 1 KB to a new directory, closes the
// engine, opens it again, and with the reopened engine still open reports
// the Go heap in use (heap_MB) and the process's resident set (rss_MB),
// both after a collection that returned freed memory to the operating
// system. It reads a few values back, so an engine that lost them fails.
func ReopenMemory(b *testing.B, name string, params map[string]string) {
	ctx := context.Background()
	val := func(i int) []byte {
		return bytes.Repeat([]byte{byte('a' + i%26)}, reopenValue)
	}
	key := func(i int) []byte { return fmt.Appendf(nil, "retained/sensors/%06d", i) }
	var heap, rss float64
	for range b.N {
		opts := engine.Options{Dir: b.TempDir(), Sync: engine.SyncNone, Params: params}
		e, err := engine.Open(ctx, name, opts)
		if err != nil {
			b.Fatalf("open: %v", err)
		}
		for i := 0; i < reopenKeys; i += reopenPerBatch {
			var batch engine.Batch
			for j := i; j < min(i+reopenPerBatch, reopenKeys); j++ {
				batch.Put(key(j), val(j))
			}
			h, err := e.Submit(ctx, &batch)
			if err != nil {
				b.Fatalf("submit: %v", err)
			}
			if _, err := h.Wait(ctx); err != nil {
				b.Fatalf("commit: %v", err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatalf("close: %v", err)
		}
		e, err = engine.Open(ctx, name, opts)
		if err != nil {
			b.Fatalf("reopen: %v", err)
		}
		heap, rss = memoryNow()
		snap, err := e.Snapshot(ctx)
		if err != nil {
			b.Fatalf("snapshot: %v", err)
		}
		for _, i := range []int{0, reopenKeys / 2, reopenKeys - 1} {
			got, err := snap.Get(ctx, key(i))
			if err != nil || !bytes.Equal(got, val(i)) {
				b.Fatalf("after reopen, key %s: %d bytes, %v; want its %d bytes", key(i), len(got), err, reopenValue)
			}
		}
		_ = snap.Close()
		if err := e.Close(); err != nil {
			b.Fatalf("close after reopen: %v", err)
		}
	}
	b.ReportMetric(heap, "heap_MB")
	b.ReportMetric(rss, "rss_MB")
}

// memoryNow collects garbage, returns freed memory to the operating system
// and reports the heap in use and the resident set, in MB.
func memoryNow() (heapMB, rssMB float64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20), float64(residentKB()) / 1024
}

// residentKB reads VmRSS from /proc/self/status; 0 where there is none.
func residentKB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
