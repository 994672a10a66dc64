package quietgc

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

func TestHeapDue(t *testing.T) {
	for _, c := range []struct {
		h    Heap
		used float64
		want bool
	}{
		{Heap{Live: 100, Goal: 300, Objects: 100}, 0.5, false},
		{Heap{Live: 100, Goal: 300, Objects: 199}, 0.5, false},
		{Heap{Live: 100, Goal: 300, Objects: 200}, 0.5, true},
		{Heap{Live: 100, Goal: 300, Objects: 350}, 0.5, true},
		{Heap{Live: 100, Goal: 300, Objects: 150}, 0.25, true},
		{Heap{Live: 300, Goal: 300, Objects: 400}, 0.5, false}, // no headroom known
		{Heap{Live: 100, Goal: 300, Objects: 90}, 0.5, false},
		{Heap{}, 0.5, false},
	} {
		if got := c.h.Due(c.used); got != c.want {
			t.Errorf("%+v.Due(%v) = %v, want %v", c.h, c.used, got, c.want)
		}
	}
}

// forced is how many collections runtime.GC has run in this process.
func forced() uint64 {
	s := []rtmetrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

var sink atomic.Pointer[[]byte]

// fill allocates garbage until share of the headroom is used.
func fill(t *testing.T, share float64) {
	t.Helper()
	runtime.GC()
	h := ReadHeap()
	want := h.Live + uint64(share*float64(h.Goal-h.Live))
	for ReadHeap().Objects < want {
		b := make([]byte, 64<<10)
		sink.Store(&b)
	}
	if h2 := ReadHeap(); !h2.Due(0.5) && share >= 0.5 {
		t.Fatalf("heap %+v not due after filling %v of the headroom of %+v", h2, share, h)
	}
}

// collector runs Run until stopped, and reports what it returned.
func collector(o Options) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Run(ctx, o) }()
	return func() int { cancel(); return <-done }
}

func TestCollectsOnlyWhenQuietAndDue(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	o := Options{Every: 40 * time.Millisecond}

	// Little allocated since the last collection: nothing to bring forward.
	fill(t, 0.1)
	before := forced()
	stop := collector(o)
	time.Sleep(400 * time.Millisecond)
	if n := stop(); n != 0 || forced() != before {
		t.Fatalf("collected %d times (forced %d) with a tenth of the headroom used", n, forced()-before)
	}

	// Most of the headroom used, but the process busy: no collection.
	fill(t, 0.7)
	before = forced()
	var spin atomic.Bool
	spin.Store(true)
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		x := 0
		for spin.Load() {
			x++
		}
		_ = x
	}()
	stop = collector(o)
	time.Sleep(400 * time.Millisecond)
	n := stop()
	spin.Store(false)
	<-spun
	if n != 0 || forced() != before {
		t.Fatalf("collected %d times (forced %d) while a core was busy", n, forced()-before)
	}

	// Quiet again: the collection comes.
	stop = collector(o)
	deadline := time.Now().Add(5 * time.Second)
	for forced() == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := stop(); n < 1 {
		t.Fatalf("no collection in 5 s of quiet with the heap %+v", ReadHeap())
	}
	if h := ReadHeap(); h.Due(0.5) {
		t.Fatalf("heap still due after the collection: %+v", h)
	}
}
