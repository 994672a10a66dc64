package main_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConformanceCommandRunsPropertyCases runs a property-based case
// through the tidemark binary, which links no testing code.
func TestConformanceCommandRunsPropertyCases(t *testing.T) {
	out, err := exec.Command(tidemarkBinary(t), "conformance", "--engines", "pebble", "--run", "C20_property").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1 passed, 0 failed") {
		t.Fatalf("tidemark conformance --run C20_property: %v\n%s", err, out)
	}
}
