//go:build nobadger

package mqttbench

// mochiOmitted says why the mochi peer is missing: it stores through
// Badger, which a build that leaves the Badger engine out leaves out as
// well.
const mochiOmitted = "the mochi peer stores through Badger, which this build left out (tag nobadger)"

// mochiTarget is never called in this build: Peer checks mochiOmitted
// first.
func mochiTarget() Target { return Target{} }
