//go:build !race

package jetstream

// raceDetector is true in a build with the race detector (see
// race_on_test.go).
const raceDetector = false
