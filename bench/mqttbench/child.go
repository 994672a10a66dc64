package mqttbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Bounds on the life of one broker process: how long it may take to
// accept connections, and to exit after SIGTERM before it is killed.
const (
	childReadyTimeout = 10 * time.Second
	childStopTimeout  = 10 * time.Second
)

// childProc is one broker running as a process of its own.
type childProc struct {
	name    string // for messages: mosquitto, tidemark
	cmd     *exec.Cmd
	logPath string
	log     *slog.Logger
	line    func(*slog.Logger, string) // passes on the log lines that matter
	exited  chan struct{}              // closed once Wait returned
	waitErr error                      // Wait's result; read only after exited
}

// startChild starts bin with args in dir, its output in dir/<name>.log.
func startChild(name, bin string, args []string, dir string, log *slog.Logger, line func(*slog.Logger, string)) (*childProc, error) {
	p := &childProc{name: name, logPath: filepath.Join(dir, name+".log"), log: log, line: line, exited: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = childProcAttr()
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that started the
		// child exits, so that thread stays with this goroutine until the
		// child is gone.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := p.cmd.Start()
		started <- err
		if err == nil {
			p.waitErr = p.cmd.Wait()
		}
		close(p.exited)
	}()
	err = <-started
	logf.Close() // the child holds its own copy
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// waitReady returns once addr answers an MQTT CONNECT, or fails when the
// process exits, ctx ends or childReadyTimeout passes. A TCP accept is
// not enough: mosquitto listens before it enters its main loop, and a
// SIGTERM that arrives in between is lost (the loop starts by setting its
// run flag again), so a broker stopped right after a bare accept could
// run on. A CONNACK comes from the main loop.
func (p *childProc) waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(childReadyTimeout)
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := dial(dctx, addr, "mqttbench-ready")
		cancel()
		if err == nil {
			c.close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before accepting connections (%w)%s", p.name, p.waitErr, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s (pid %d) did not accept connections on %s within %v%s", p.name, p.cmd.Process.Pid, addr, childReadyTimeout, p.logTail())
		}
	}
}

func (p *childProc) exitedEarly() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop ends the process this proc started, by its handle (a pidfd where
// the OS has one, so never a process that reused the pid): SIGTERM, then
// SIGKILL after childStopTimeout. It fails if the process had already
// exited, exits with an error, or needed SIGKILL.
func (p *childProc) stop() error {
	defer p.forwardLog()
	if p.exitedEarly() {
		return fmt.Errorf("%s (pid %d) exited before it was stopped (%w)%s", p.name, p.cmd.Process.Pid, p.waitErr, p.logTail())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s (pid %d): SIGTERM: %w; killed", p.name, p.cmd.Process.Pid, err)
	}
	timer := time.NewTimer(childStopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("%s (pid %d) after SIGTERM: %w%s", p.name, p.cmd.Process.Pid, p.waitErr, p.logTail())
		}
		return nil
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM; killed%s", p.name, p.cmd.Process.Pid, childStopTimeout, p.logTail())
	}
}

// logTail is the end of the process's log, for error messages.
func (p *childProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	const limit = 2048
	if len(b) > limit {
		b = b[len(b)-limit:]
	}
	return "; log " + p.logPath + ":\n" + strings.TrimRight(string(b), "\n")
}

// forwardLog passes the lines of the process's log that matter to the
// logger, through the process's line filter.
func (p *childProc) forwardLog() {
	f, err := os.Open(p.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p.line(p.log, sc.Text())
	}
}
