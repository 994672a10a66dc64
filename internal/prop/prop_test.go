package prop

import (
	"fmt"
	"strings"
	"testing"
)

type recorder struct{ msg string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestCheckReportsSeedAndDraws(t *testing.T) {
	var r recorder
	Check(&r, "p", func(pt *T) {
		if pt.IntRange(0, 9, "n") >= 0 {
			pt.Fatalf("always")
		}
	})
	if !strings.Contains(r.msg, "TIDEMARK_PROP_SEED=") || !strings.Contains(r.msg, "n=") || !strings.Contains(r.msg, "always") {
		t.Fatalf("report %q lacks the seed, the draws or the message", r.msg)
	}
}

func TestSameSeedSameDraws(t *testing.T) {
	t.Setenv("TIDEMARK_PROP_SEED", "42")
	var got []int
	for range 2 {
		Check(t, "p", func(pt *T) { got = append(got, pt.IntRange(0, 1<<30, "v")) })
	}
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("draws %v: want one equal draw per replay", got)
	}
}

func TestPanicFailsTheRun(t *testing.T) {
	var r recorder
	Check(&r, "p", func(pt *T) { panic("boom") })
	if !strings.Contains(r.msg, "panic: boom") {
		t.Fatalf("report %q", r.msg)
	}
}

func TestRangeBounds(t *testing.T) {
	Check(t, "bounds", func(pt *T) {
		if v := pt.IntRange(3, 5, "v"); v < 3 || v > 5 {
			pt.Fatalf("%d out of [3, 5]", v)
		}
	})
}
