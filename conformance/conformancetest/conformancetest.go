// Package conformancetest runs the conformance suite under go test, as
// subtests <engine>/<suite>/<case>. It is the only part of the suite that
// imports testing, so the tidemark binary, which runs the same cases, links
// none of it.
package conformancetest

import (
	"testing"

	"github.com/tidemark-io/tidemark/conformance"
)

// Run runs every case against tg as subtests <engine>/<suite>/<case>.
func Run(t *testing.T, tg conformance.Target) {
	RunCases(t, tg, conformance.Cases())
}

// RunCases runs cs (see conformance.Filter) against tg as subtests
// <engine>/<suite>/<case>, the way Run runs every case.
func RunCases(t *testing.T, tg conformance.Target, cs []conformance.Case) {
	t.Run(tg.Engine, func(t *testing.T) {
		for _, suite := range conformance.Suites() {
			t.Run(suite, func(t *testing.T) {
				for _, c := range cs {
					if c.Suite == suite {
						t.Run(c.Name, func(t *testing.T) { c.Run(t, tg) })
					}
				}
			})
		}
	})
}
