// Package proc runs the processes that tests and benchmarks start beside
// themselves (a `tidemark serve`, mosquitto, a test binary run again as a
// broker or a committer to be killed): started in a process group of
// their own that dies with the parent, their output kept, ended by their
// own handle, and waited for with a bound.
package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec says what to run.
type Spec struct {
	// Name labels the process in errors (default: the binary's base name).
	Name string
	Bin  string
	Args []string
	// Dir is the working directory ("": the parent's).
	Dir string
	// Env is added to the parent's environment.
	Env []string
	// Log receives the process's standard error, and its standard output
	// unless Lines is set; it is kept in memory as well (Log, LogTail).
	Log io.Writer
	// Lines, when set, is called with each line of standard output, in
	// order, from one goroutine.
	Lines func(string)
}

// Proc is a running (or ended) process that this process started. It is
// only ever signalled through its own handle, so it never signals a
// process that reused its pid.
type Proc struct {
	name string
	cmd  *exec.Cmd
	log  *buffer

	exited  chan struct{} // closed once the process was reaped and its output read
	waitErr error         // read only after exited
}

// Start starts s. The process ends with this one should this one die
// without ending it (Linux).
func Start(s Spec) (*Proc, error) {
	if s.Name == "" {
		s.Name = s.Bin[strings.LastIndexByte(s.Bin, '/')+1:]
	}
	p := &Proc{name: s.Name, log: &buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(s.Bin, s.Args...)
	p.cmd.Dir = s.Dir
	if len(s.Env) > 0 {
		p.cmd.Env = append(os.Environ(), s.Env...)
	}
	var out io.Writer = p.log
	if s.Log != nil {
		out = io.MultiWriter(p.log, s.Log)
	}
	p.cmd.Stderr = out
	var stdout io.ReadCloser
	if s.Lines != nil {
		var err error
		if stdout, err = p.cmd.StdoutPipe(); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
	} else {
		p.cmd.Stdout = out
	}
	p.cmd.SysProcAttr = procAttr()
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the
		// child exits, so that thread stays with this goroutine until the
		// child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := p.cmd.Start()
		started <- err
		if err != nil {
			close(p.exited)
			return
		}
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				s.Lines(sc.Text())
			}
			_, _ = io.Copy(io.Discard, stdout)
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%s: %w", s.Name, err)
	}
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Signal sends sig to the process, unless it has ended.
func (p *Proc) Signal(sig os.Signal) error {
	if !p.Running() {
		return fmt.Errorf("%s (pid %d): %w", p.name, p.Pid(), os.ErrProcessDone)
	}
	return p.cmd.Process.Signal(sig)
}

// Exited is closed once the process has ended and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is how the process ended (nil: exit status 0); nil while it runs.
func (p *Proc) Err() error {
	select {
	case <-p.exited:
		return p.waitErr
	default:
		return nil
	}
}

// Running reports whether the process has not ended yet.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill ends the process with SIGKILL and waits until it is reaped (at
// most a minute: a process in uninterruptible sleep may take a while).
// It returns false if the process did not end within that time.
func (p *Proc) Kill() bool {
	if p.Running() {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
		return true
	case <-time.After(time.Minute):
		return false
	}
}

// Stop ends the process with SIGTERM, and SIGKILL after grace. It fails
// if the process had already ended, ends with an error, or needed
// SIGKILL; the error carries the end of its output.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Running() {
		return fmt.Errorf("%s (pid %d) ended before it was stopped (%s)%s", p.name, p.Pid(), p.exit(), p.tail())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.Kill()
		return fmt.Errorf("%s (pid %d): SIGTERM: %w; killed", p.name, p.Pid(), err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("%s (pid %d) after SIGTERM: %w%s", p.name, p.Pid(), p.waitErr, p.tail())
		}
		return nil
	case <-timer.C:
		p.Kill()
		return fmt.Errorf("%s (pid %d) did not end within %v of SIGTERM; killed%s", p.name, p.Pid(), grace, p.tail())
	}
}

// WaitListen returns once probe succeeds against addr (nil probe: a TCP
// connection is accepted), and fails when the process ends, ctx ends or
// timeout passes; the error carries the end of its output.
func (p *Proc) WaitListen(ctx context.Context, addr string, timeout time.Duration, probe func(ctx context.Context, addr string) error) error {
	if probe == nil {
		probe = dialProbe
	}
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx, addr)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s ended before it listened on %s (%s)%s", p.name, addr, p.exit(), p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not listen on %s within %v%s", p.name, p.Pid(), addr, timeout, p.tail())
		}
	}
}

func dialProbe(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// Log is what the process wrote to its log so far (the newest 4-8 MiB
// of it).
func (p *Proc) Log() string { return p.log.String() }

// LogTail is the last n lines of the log.
func (p *Proc) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// exit says how the process ended; it has.
func (p *Proc) exit() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

func (p *Proc) tail() string {
	if t := p.LogTail(20); t != "" {
		return "; its output ends:\n" + t
	}
	return ""
}

// logKeep bounds the output a Proc keeps in memory: past it, the older
// half is dropped, so a chatty broker under a long benchmark cannot grow
// its parent without limit.
const logKeep = 8 << 20

// buffer is a bytes.Buffer safe for a writer and readers at once that
// keeps the newest logKeep bytes or so.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.b.Write(p)
	if b.b.Len() > logKeep {
		b.b.Next(b.b.Len() - logKeep/2)
		rest := bytes.Clone(b.b.Bytes())
		b.b.Reset()
		b.b.Write(rest)
	}
	return n, err
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
