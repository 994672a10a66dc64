// Package conformance is Tidemark's one conformance suite: engine contract
// cases, cursor-resume cases and QoS2 pipeline cases, run against every
// engine through a Target. Engine packages run it from their tests through
// conformancetest (TestConformance/<engine>/<suite>/<case>); `tidemark
// conformance` runs the engine x case matrix from the command line.
//
// The cases, their identifiers (C01, Q01, M01, ...) and the rules they
// check are catalogued in docs/semantics.md; each case's name starts with
// its identifier, so reports stay comparable across versions.
package conformance

import (
	"context"
	"errors"
	"maps"
	"regexp"

	"github.com/tidemark-io/tidemark/engine"
)

// T is the part of *testing.T the cases use, so the same cases run under
// go test and under `tidemark conformance`. Fatalf, FailNow and Skipf must
// not return (testing.T calls runtime.Goexit). A case skips only when the
// build lacks what it needs (see needFaults), never for an engine.
type T interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	FailNow()
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
	TempDir() string
	Context() context.Context
}

// Target says which engine a run is held against and how to open it.
type Target struct {
	// Engine is the registered engine name.
	Engine string
	// Params are engine parameters every case opens the engine with.
	Params map[string]string
	// Partitions, when above 1, splits the brokers' stores over that
	// many engines (mqtt.NewPartitioned); the cases registered with
	// onPartitions set it.
	Partitions int
}

// Case is one conformance case.
type Case struct {
	Suite string
	Name  string
	Run   func(t T, tg Target)
}

var cases []Case

func register(suite string, cs ...Case) {
	for _, c := range cs {
		c.Suite = suite
		cases = append(cases, c)
	}
}

// Cases returns every case, in suite order.
func Cases() []Case { return append([]Case(nil), cases...) }

// Suites returns the suite names in order.
func Suites() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cases {
		if !seen[c.Suite] {
			seen[c.Suite] = true
			out = append(out, c.Suite)
		}
	}
	return out
}

// Filter returns the cases whose "suite/name" matches re (all when nil).
func Filter(re *regexp.Regexp) []Case {
	var out []Case
	for _, c := range cases {
		if re == nil || re.MatchString(c.Suite+"/"+c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// Open opens the target's engine in dir; mods adjust the options. The
// engine is closed when the case ends.
func (tg Target) Open(t T, dir string, mods ...func(*engine.Options)) engine.Engine {
	t.Helper()
	e, err := tg.TryOpen(t.Context(), dir, mods...)
	if err != nil {
		t.Fatalf("open %s in %s: %v", tg.Engine, dir, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			t.Errorf("close %s: %v", tg.Engine, err)
		}
	})
	return e
}

// TryOpen opens the target's engine in dir and returns the error.
func (tg Target) TryOpen(ctx context.Context, dir string, mods ...func(*engine.Options)) (engine.Engine, error) {
	opts := engine.Options{Dir: dir, Params: maps.Clone(tg.Params)}
	for _, m := range mods {
		m(&opts)
	}
	return engine.Open(ctx, tg.Engine, opts)
}
