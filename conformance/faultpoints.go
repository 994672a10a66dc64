package conformance

import (
	"sync"
	"time"
)

// points is the suites' fault rig: named points of type K that the code
// under test passes through (a table reader's "yield", "blocked" and
// "live"; a broker's mqtt.Point and mqtt.Kind hooks). It counts every hit
// and, per point, can run a callback, sleep, hold the caller until the
// case releases it, or answer false at the n-th hit, which a hook takes as
// "stop here". Safe for concurrent use.
type points[K comparable] struct {
	mu     sync.Mutex
	hits   map[K]int
	on     map[K]func(n int)
	delay  map[K]time.Duration
	holds  map[K]chan struct{}
	stopAt map[K]int
	held   chan K // told of each hit a hold stopped, when there is room
}

func newPoints[K comparable]() *points[K] {
	return &points[K]{hits: map[K]int{}, on: map[K]func(int){}, delay: map[K]time.Duration{},
		holds: map[K]chan struct{}{}, stopAt: map[K]int{}, held: make(chan K, 64)}
}

// hit passes a caller through point k: it counts the hit, runs k's
// callback, sleeps k's delay and waits on k's hold; it returns false at
// k's stop hit.
func (p *points[K]) hit(k K) bool {
	p.mu.Lock()
	p.hits[k]++
	n := p.hits[k]
	on, d, hold, stopAt := p.on[k], p.delay[k], p.holds[k], p.stopAt[k]
	p.mu.Unlock()
	if on != nil {
		on(n)
	}
	if d > 0 {
		time.Sleep(d)
	}
	if hold != nil {
		select {
		case p.held <- k:
		default:
		}
		<-hold
	}
	return stopAt == 0 || n != stopAt
}

// count is the number of hits of k so far.
func (p *points[K]) count(k K) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[k]
}

// stop makes the n-th hit of k answer false.
func (p *points[K]) stop(k K, n int) *points[K] {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopAt[k] = n
	return p
}

// onHit runs fn with the hit count at every hit of k.
func (p *points[K]) onHit(k K, fn func(n int)) *points[K] {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on[k] = fn
	return p
}

// delayAt makes every hit of k sleep d.
func (p *points[K]) delayAt(k K, d time.Duration) *points[K] {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[k] = d
	return p
}

// holdAt makes hits of k wait until the returned release is called.
func (p *points[K]) holdAt(k K) (release func()) {
	ch := make(chan struct{})
	p.mu.Lock()
	p.holds[k] = ch
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.holds[k] == ch {
				delete(p.holds, k)
			}
			p.mu.Unlock()
			close(ch)
		})
	}
}

// holding is k's hold, nil when there is none: for a hook that hands the
// wait to its caller instead of waiting itself.
func (p *points[K]) holding(k K) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch := p.holds[k]; ch != nil {
		return ch
	}
	return nil
}

// waitHeld waits until a hold stopped a hit of k.
func (p *points[K]) waitHeld(t T, k K) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case got := <-p.held:
			if got == k {
				return
			}
		case <-deadline:
			t.Fatalf("no hit of %v reached its hold within %v", k, waitFor)
		}
	}
}
