package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/proc"
)

// envChild carries a child-process spec. A test binary (or the tidemark
// binary) started with it set runs the child workload instead of its tests,
// so kill-9 cases can crash a real process that holds a real engine.
const envChild = "TIDEMARK_CONFORMANCE_CHILD"

type childSpec struct {
	Mode   string            `json:"mode"`
	Engine string            `json:"engine"`
	Dir    string            `json:"dir"`
	Params map[string]string `json:"params,omitempty"`
	// Sync is the engine's sync mode by name; the default when empty.
	Sync string `json:"sync,omitempty"`
}

// MaybeRunChild runs the child workload and exits when this process was
// started as a conformance child; otherwise it returns at once. Call it
// first thing in TestMain of every package that runs the suite, and in the
// tidemark main.
func MaybeRunChild() {
	raw := os.Getenv(envChild)
	if raw == "" {
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "conformance child: bad spec: %v\n", err)
		os.Exit(2)
	}
	var err error
	switch spec.Mode {
	case "commits":
		err = childCommits(spec)
	default:
		err = runChildMode(spec)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance child %s: %v\n", spec.Mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childModes lets other suites add child workloads.
var childModes = map[string]func(childSpec) error{}

func runChildMode(spec childSpec) error {
	f, ok := childModes[spec.Mode]
	if !ok {
		return fmt.Errorf("unknown mode %q", spec.Mode)
	}
	return f(spec)
}

// childCommits streams synced commits from 8 goroutines and prints the id
// of each after its handle completed; it runs until killed (or a minute).
// Half the goroutines defer their commits (engine.Batch.Defer).
func childCommits(spec childSpec) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := engine.Options{Dir: spec.Dir, Params: spec.Params}
	if spec.Sync != "" {
		var err error
		if opts.Sync, err = engine.ParseSyncMode(spec.Sync); err != nil {
			return err
		}
		// No periodic sync during the child's short life: what survives
		// the kill is what the mode writes before a commit completes.
		opts.SyncInterval = time.Hour
	}
	e, err := engine.Open(ctx, spec.Engine, opts)
	if err != nil {
		return err
	}
	defer e.Close()
	var out sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%d/%d", w, i)
				b := new(engine.Batch).Put([]byte("k/"+id), []byte(id)).Append([]byte(id))
				b.Defer = w%2 == 1
				_, err := engine.Commit(ctx, e, b)
				if err != nil {
					return
				}
				out.Lock()
				os.Stdout.WriteString(id + "\n")
				out.Unlock()
			}
		}()
	}
	wg.Wait()
	return nil
}

// child is a running child process: this binary run again with a
// childSpec.
type child struct {
	*proc.Proc
	// lines carries the child's standard output, line by line; it is
	// closed once the child has ended and every line was taken.
	lines chan string
}

func startChild(t T, spec childSpec) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("executable: %v", err)
	}
	raw, _ := json.Marshal(spec)
	c := &child{lines: make(chan string, 1024)}
	c.Proc, err = proc.Start(proc.Spec{Name: "conformance child " + spec.Mode, Bin: exe, Args: []string{"-test.run=^$"},
		Env: []string{envChild + "=" + string(raw)}, Lines: func(l string) { c.lines <- l }})
	if err != nil {
		t.Fatalf("start child: %v", err)
	}
	go func() {
		<-c.Exited() // every line was handed over before
		close(c.lines)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// kill ends the child with SIGKILL and reaps it, taking what it printed.
func (c *child) kill() {
	_ = c.Signal(os.Kill)
	for range c.lines {
	}
}

// stderr is what the child wrote to its standard error.
func (c *child) stderr() string { return c.Log() }

// caseSigkill kills a child process with SIGKILL in the middle of a stream
// of synced commits and checks every commit it reported complete survived.
func caseSigkill(t T, tg Target) { sigkill(t, tg, engine.SyncAlways) }

// sigkill is caseSigkill with the child's engine in sync mode mode. Every
// mode promises that a process crash loses no completed commit: under
// SyncNone and SyncInterval only an operating-system crash may.
func sigkill(t T, tg Target, mode engine.SyncMode) {
	dir := t.TempDir()
	c := startChild(t, childSpec{Mode: "commits", Engine: tg.Engine, Dir: dir, Params: tg.Params, Sync: mode.String()})
	lines := c.lines
	var done []string
	deadline := time.After(60 * time.Second)
collect:
	for len(done) < 500 {
		select {
		case l, ok := <-lines:
			if !ok {
				break collect
			}
			done = append(done, l)
		case <-deadline:
			break collect
		}
	}
	if len(done) < 50 {
		c.kill()
		t.Fatalf("child completed only %d commits before stopping (does TestMain call conformance.MaybeRunChild?); stderr: %s", len(done), c.stderr())
	}
	if err := c.Signal(os.Kill); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	// Lines still in the pipe were printed after their commit completed.
	for l := range lines {
		done = append(done, l)
	}

	e := tg.Open(t, dir)
	inLog := map[string]bool{}
	es := scanAll(t, e, 0, false)
	if err := checkLogOrder(e.Granularity(), es); err != nil {
		t.Fatalf("log after crash: %v", err)
	}
	for _, en := range es {
		inLog[string(en.Value)] = true
	}
	for _, id := range done {
		if !inLog[id] {
			t.Fatalf("commit %s completed before the kill but its log entry is gone (%d completed, %d in log)", id, len(done), len(es))
		}
		wantValue(t, e, "k/"+id, id)
	}
	r := commit(t, e, new(engine.Batch).Append([]byte("after-crash")))
	if n := len(es); n > 0 && r.Keys[0] <= es[n-1].Key {
		t.Fatalf("key after crash %d not above the last recovered key %d", r.Keys[0], es[n-1].Key)
	}
	t.Logf("%d completed commits survived SIGKILL (%d entries in the log)", len(done), len(es))
}
