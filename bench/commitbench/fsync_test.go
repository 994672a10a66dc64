package commitbench

import (
	"os"
	"testing"
	"time"
)

// TestFsyncProbes checks that both probes measure a rate and leave
// nothing behind in the directory they ran in.
func TestFsyncProbes(t *testing.T) {
	dir := t.TempDir()
	for name, probe := range map[string]func(string, time.Duration) (float64, error){
		"appends": FsyncRate, "in place": FsyncRateInPlace,
	} {
		rate, err := probe(dir, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rate <= 0 {
			t.Errorf("%s: %v syncs/s, want more than 0", name, rate)
		}
		if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
			t.Errorf("%s: left %v in the directory (%v)", name, left, err)
		}
	}
}
