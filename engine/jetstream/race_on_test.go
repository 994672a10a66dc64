//go:build race

package jetstream

// raceDetector is true in a build with the race detector, which slows the
// broker and the servers about tenfold: load tests size down with it.
const raceDetector = true
