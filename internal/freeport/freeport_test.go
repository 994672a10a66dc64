package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
		if p < low || p >= ephemeralLow() {
			t.Fatalf("port %d outside [%d, %d)", p, low, ephemeralLow())
		}
	}
	// A port in use is skipped.
	p, _ := Port()
	if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1)); err == nil {
		defer ln.Close()
	}
	q, err := Port()
	if err != nil {
		t.Fatal(err)
	}
	if q == p+1 {
		t.Fatalf("port %d in use was given", q)
	}
}
