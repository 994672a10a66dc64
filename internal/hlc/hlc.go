// Package hlc issues hybrid-logical-clock log keys for the embedded
// engines and the table layer.
package hlc

import (
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine/driver"
)

// logicalBits is the width of the logical counter in an HLC key: the high
// 48 bits hold Unix milliseconds (good until the year 10889), the low 16 a
// counter that orders keys issued within one millisecond.
const logicalBits = 16

// Clock issues hybrid-logical-clock log keys: strictly increasing, close to
// wall time, and never below a floor the engine raises from what it finds
// on disk, so a clock that moved backwards across a restart cannot reissue
// a key below one already persisted.
type Clock struct {
	mu   sync.Mutex
	last uint64
	now  func() time.Time
}

// New returns a clock reading now (time.Now when nil) whose first key is
// above floor.
func New(now func() time.Time, floor driver.LogKey) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now, last: uint64(floor)}
}

// Next returns a key above every key returned or observed before.
func (c *Clock) Next() driver.LogKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextLocked()
}

// NextN reserves n consecutive keys and returns the first.
func (c *Clock) NextN(n int) driver.LogKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := c.nextLocked()
	c.last += uint64(n - 1)
	return first
}

func (c *Clock) nextLocked() driver.LogKey {
	phys := uint64(c.now().UnixMilli()) << logicalBits
	if phys > c.last {
		c.last = phys
	} else {
		c.last++
	}
	return driver.LogKey(c.last)
}

// Observe raises the clock so later keys are above k.
func (c *Clock) Observe(k driver.LogKey) {
	c.mu.Lock()
	if uint64(k) > c.last {
		c.last = uint64(k)
	}
	c.mu.Unlock()
}
