package topic

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatchShared measures routing one message to a shared group of
// n members (subscribed in random order) beside nothing else: the
// router's cost per message of a large group.
func BenchmarkMatchShared(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var ix Index
			for _, i := range rand.Perm(n) {
				ix.Add(Subscription{Client: fmt.Sprintf("c%06d", i), Filter: "jobs/#", Group: "w", QoS: 1})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				ix.Match("jobs/x", func(Subscription) {})
			}
		})
	}
}
