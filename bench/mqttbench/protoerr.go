package mqttbench

import "fmt"

// protoErrors counts the packets a client got that no correct broker
// sends, and keeps what the first of them was: a count alone does not
// say which rule a broker broke. The caller holds the lock that guards
// it.
type protoErrors struct {
	n     int
	first string
}

// add counts one, described by format and args if it is the first.
func (e *protoErrors) add(format string, args ...any) {
	if e.n == 0 {
		e.first = fmt.Sprintf(format, args...)
	}
	e.n++
}

// merge adds o's count to e's, keeping e's first when it has one.
func (e *protoErrors) merge(o protoErrors) {
	if e.n == 0 {
		e.first = o.first
	}
	e.n += o.n
}
