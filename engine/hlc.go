package engine

import (
	"sync"
	"time"
)

// logicalBits is the width of the logical counter in an HLC key: the high
// 48 bits hold Unix milliseconds (good until the year 10889), the low 16 a
// counter that orders keys issued within one millisecond.
const logicalBits = 16

// HLC issues hybrid-logical-clock log keys: strictly increasing, close to
// wall time, and never below a floor the engine raises from what it finds
// on disk, so a clock that moved backwards across a restart cannot reissue
// a key below one already persisted.
type HLC struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

// NewHLC returns a clock reading now (time.Now when nil) whose first key is
// above floor.
func NewHLC(now func() time.Time, floor LogKey) *HLC {
	if now == nil {
		now = time.Now
	}
	return &HLC{now: now, last: uint64(floor)}
}

// Next returns a key above every key returned or observed before.
func (c *HLC) Next() LogKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextLocked()
}

// NextN reserves n consecutive keys and returns the first.
func (c *HLC) NextN(n int) LogKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.nextLocked()
	c.last += uint64(n - 1)
	return first
}

func (c *HLC) nextLocked() LogKey {
	phys := uint64(c.now().UnixMilli()) << logicalBits
	if phys > c.last {
		c.last = phys
	} else {
		c.last++
	}
	return LogKey(c.last)
}

// Observe raises the clock so later keys are above k.
func (c *HLC) Observe(k LogKey) {
	c.mu.Lock()
	if uint64(k) > c.last {
		c.last = uint64(k)
	}
	c.mu.Unlock()
}

// Time returns the wall time an HLC key was issued at, to the millisecond.
func (k LogKey) Time() time.Time {
	return time.UnixMilli(int64(uint64(k) >> logicalBits))
}
