package benchtest

import (
	"testing"

	"github.com/tidemark-io/tidemark/engine"
)

// Slots measures the life of one hot slot on the registered engine name,
// without syncs: a commit that puts the slot if it is absent, then one
// that deletes it if it holds what was put, over and over. It is an MQTT
// client's QoS 2 exchange with packet id 1 each time, the shape that makes
// an LSM engine's check walk every version of the key not yet compacted.
// One op is one put and one delete.
func Slots(b *testing.B, name string) {
	e := openNoSync(b, name)
	ctx := b.Context()
	key, val := []byte("slot/client/1"), []byte("staged message")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := engine.Commit(ctx, e, new(engine.Batch).ExpectAbsent(key).Put(key, val)); err != nil {
			b.Fatal(err)
		}
		if _, err := engine.Commit(ctx, e, new(engine.Batch).Expect(key, val).Delete(key)); err != nil {
			b.Fatal(err)
		}
	}
}

// openNoSync opens the registered engine name without syncs in a
// temporary directory, closed when the benchmark ends.
func openNoSync(b *testing.B, name string) engine.Engine {
	e, err := engine.Open(b.Context(), name, engine.Options{Dir: b.TempDir(), Sync: engine.SyncNone})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// commitEach fills e with n writes, add(batch, i) the i-th, committed a
// thousand to a batch.
func commitEach(b *testing.B, e engine.Engine, n int, add func(batch *engine.Batch, i int)) {
	for i := 0; i < n; i += 1000 {
		batch := new(engine.Batch)
		for j := i; j < min(n, i+1000); j++ {
			add(batch, j)
		}
		if _, err := engine.Commit(b.Context(), e, batch); err != nil {
			b.Fatal(err)
		}
	}
}
