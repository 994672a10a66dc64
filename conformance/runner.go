package conformance

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Outcome is the result of one case against one engine.
type Outcome struct {
	Engine string `json:"engine"`
	Suite  string `json:"suite"`
	Case   string `json:"case"`
	Pass   bool   `json:"pass"`
	// Skip says why the case did not run in this build (it needs one with
	// tag faults); Pass is false then.
	Skip     string        `json:"skip,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// RunCase runs one case against tg outside go test and reports its outcome.
// A case that does not finish within timeout fails.
func RunCase(ctx context.Context, tg Target, c Case, timeout time.Duration) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	root, err := os.MkdirTemp("", "tidemark-conformance-")
	if err != nil {
		return Outcome{Engine: tg.Engine, Suite: c.Suite, Case: c.Name, Error: err.Error()}
	}
	defer os.RemoveAll(root)
	t := &runT{ctx: ctx, root: root}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.fail(fmt.Sprintf("panic: %v", r))
			}
		}()
		defer t.runCleanups()
		c.Run(t, tg)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.fail(fmt.Sprintf("timed out after %v", timeout))
	}
	o := Outcome{Engine: tg.Engine, Suite: c.Suite, Case: c.Name, Duration: time.Since(start)}
	o.Pass = !t.Failed()
	if o.Skip = t.skipped(); o.Skip != "" && o.Pass {
		o.Pass = false
	} else if !o.Pass {
		o.Error = t.firstError()
	}
	return o
}

// runT implements T for RunCase: Fatalf ends the case's goroutine the way
// testing.T does.
type runT struct {
	ctx      context.Context
	root     string
	mu       sync.Mutex
	failed   bool
	skip     string
	errs     []string
	cleanups []func()
	dirs     int
}

func (t *runT) Helper()                         {}
func (t *runT) Logf(format string, args ...any) {}
func (t *runT) Context() context.Context        { return t.ctx }

func (t *runT) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

func (t *runT) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *runT) FailNow() {
	t.fail("FailNow")
	runtime.Goexit()
}

func (t *runT) Skipf(format string, args ...any) {
	t.mu.Lock()
	t.skip = fmt.Sprintf(format, args...)
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *runT) skipped() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.skip
}

func (t *runT) fail(msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	t.errs = append(t.errs, msg)
}

func (t *runT) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *runT) firstError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.errs, "; ")
}

func (t *runT) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *runT) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}

func (t *runT) TempDir() string {
	t.mu.Lock()
	t.dirs++
	n := t.dirs
	t.mu.Unlock()
	dir := fmt.Sprintf("%s/%03d", t.root, n)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	return dir
}
