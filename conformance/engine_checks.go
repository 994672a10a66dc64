package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/tidemark-io/tidemark/engine"
)

// caseChecksFollowRewrites commits a random run of batches over three keys
// that are written and deleted over and over (the life of an MQTT client's
// QoS 2 slot), each batch with checks that hold or, one time in three, do
// not: a batch must commit exactly when every check holds against the
// model of what committed before it, and after it every key reads as the
// model says. An engine that caches what checks read (Pebble walks a
// rewritten key's versions otherwise) must keep the cache exact.
func caseChecksFollowRewrites(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 11))
	keys := []string{"slot/1", "slot/2", "slot/3"}
	model := map[string][]byte{} // absent keys are missing
	value := func() []byte {
		if rng.IntN(5) == 0 {
			return []byte{} // empty: present, not absent
		}
		return fmt.Appendf(nil, "v%d", rng.IntN(4))
	}
	for step := range 1500 {
		b := new(engine.Batch)
		holds := true
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				continue
			}
			cur, present := model[k]
			wrong := rng.IntN(3) == 0
			switch {
			case present != wrong:
				want := cur
				if wrong {
					want = value()
				}
				b.Expect([]byte(k), want)
				holds = holds && present && bytes.Equal(want, cur)
			default:
				b.ExpectAbsent([]byte(k))
				holds = holds && !present
			}
		}
		next := map[string][]byte{}
		deleted := map[string]bool{}
		for _, k := range keys {
			switch rng.IntN(3) {
			case 0:
				v := value()
				b.Put([]byte(k), v)
				next[k], deleted[k] = v, false
			case 1:
				b.Delete([]byte(k))
				deleted[k] = true
				delete(next, k)
			}
		}
		if len(b.Ops) == 0 && len(b.Checks) == 0 {
			continue
		}
		b.Append(fmt.Appendf(nil, "step %d", step))
		_, err := engine.Commit(ctx, e, b)
		switch {
		case holds && err != nil:
			t.Fatalf("step %d: a batch whose checks hold failed: %v (seed %d)", step, err, seed)
		case !holds && !errors.Is(err, engine.ErrConflict):
			t.Fatalf("step %d: a batch with a failing check returned %v, want a conflict (seed %d)", step, err, seed)
		case holds:
			for k, v := range next {
				model[k] = v
			}
			for k, d := range deleted {
				if d {
					delete(model, k)
				}
			}
		}
		if step%50 == 0 || step == 1499 {
			for _, k := range keys {
				got, present := get(t, e, k)
				want, wantPresent := model[k]
				if present != wantPresent || !bytes.Equal(got, want) {
					t.Fatalf("step %d: %s reads %q (present %v), want %q (present %v) (seed %d)", step, k, got, present, want, wantPresent, seed)
				}
			}
		}
	}
}
