// Package prop runs property checks: a function over random draws, run
// many times, a failing run reported with its seed and its draws so that
// it can be replayed. The conformance suite uses it rather than a
// property-testing library because such libraries import testing, and the
// suite also runs inside the tidemark binary. It does not shrink a failing
// run: the draws are few and small, and the report lists them all.
package prop

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// DefaultChecks is how many runs Check makes unless the environment
// variable TIDEMARK_PROP_CHECKS asks for another number.
const DefaultChecks = 100

// TB is what Check reports a failure to (the conformance suite's T and
// testing.TB have it). Fatalf must not return.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// T is one run of a property: its draws come from a generator seeded for
// the run, so the same seed draws the same values.
type T struct {
	rng   *rand.Rand
	draws []string
}

// failure is what T.Fatalf panics with to end the run; Check recovers it.
type failure struct{ msg string }

// IntRange draws an int in [lo, hi], recorded under label for the report.
func (t *T) IntRange(lo, hi int, label string) int {
	v := lo + t.rng.IntN(hi-lo+1)
	t.draws = append(t.draws, fmt.Sprintf("%s=%d", label, v))
	return v
}

// Float64Range draws a float64 in [lo, hi), recorded under label for the
// report.
func (t *T) Float64Range(lo, hi float64, label string) float64 {
	v := lo + t.rng.Float64()*(hi-lo)
	t.draws = append(t.draws, fmt.Sprintf("%s=%g", label, v))
	return v
}

// Bool draws a bool, recorded under label for the report.
func (t *T) Bool(label string) bool {
	v := t.rng.IntN(2) == 1
	t.draws = append(t.draws, fmt.Sprintf("%s=%t", label, v))
	return v
}

// Fatalf fails the run and ends it. It must be called on the goroutine
// running the property, as with testing.T.
func (t *T) Fatalf(format string, args ...any) {
	panic(failure{fmt.Sprintf(format, args...)})
}

// Check runs f DefaultChecks times (TIDEMARK_PROP_CHECKS overrides), each
// with a fresh seed, and fails tb at the first failing run, naming the
// seed and the draws. With TIDEMARK_PROP_SEED set it runs f once, with that
// seed, to replay a reported failure. A panic in f fails the run like
// Fatalf.
func Check(tb TB, name string, f func(*T)) {
	tb.Helper()
	checks := DefaultChecks
	if s := os.Getenv("TIDEMARK_PROP_CHECKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("%s: TIDEMARK_PROP_CHECKS=%q: want a positive number", name, s)
		}
		checks = n
	}
	base := rand.Uint64()
	if s := os.Getenv("TIDEMARK_PROP_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("%s: TIDEMARK_PROP_SEED=%q: %v", name, s, err)
		}
		base, checks = seed, 1
	}
	for i := range checks {
		seed := base + uint64(i)
		t := &T{rng: rand.New(rand.NewPCG(seed, seed))}
		if msg, failed := run(t, f); failed {
			tb.Fatalf("%s: run %d of %d failed (replay: TIDEMARK_PROP_SEED=%d): %s\ndraws: %s",
				name, i+1, checks, seed, msg, strings.Join(t.draws, " "))
		}
	}
}

// run runs f on t and returns the failure message, if any.
func run(t *T, f func(*T)) (msg string, failed bool) {
	defer func() {
		switch r := recover().(type) {
		case nil:
		case failure:
			msg, failed = r.msg, true
		default:
			msg, failed = fmt.Sprintf("panic: %v", r), true
		}
	}()
	f(t)
	return "", false
}
