package mqttbench

import (
	"math/bits"
	"time"
)

// histogram records durations in log-linear buckets: 64 linear steps per
// power of two, so a quantile is within about 1.6% of the exact value while
// the memory stays fixed however long a point runs.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histBuckets = (64-histSubBits+1)*histSub + 1
)

func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSubBits
	return e*histSub + int(v>>(e-1)) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := i / histSub
	low := uint64(i%histSub+histSub) << (e - 1)
	return low + (uint64(1)<<(e-1))/2
}

func (h *histogram) add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histBucket(uint64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the duration at quantile q in [0, 1]; zero when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(histBuckets - 1))
}

// bitset is a growable set of sequence numbers.
type bitset []uint64

// set adds i and reports whether it was already present.
func (b *bitset) set(i uint64) bool {
	w := int(i / 64)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w-len(*b)+1+len(*b)/2)...)
	}
	m := uint64(1) << (i % 64)
	was := (*b)[w]&m != 0
	(*b)[w] |= m
	return was
}

// count returns the number of members.
func (b bitset) count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// missing returns the number of members of b that are not in o.
func (b bitset) missing(o bitset) int {
	n := 0
	for i, w := range b {
		if i < len(o) {
			w &^= o[i]
		}
		n += bits.OnesCount64(w)
	}
	return n
}
