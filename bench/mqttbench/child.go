package mqttbench

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tidemark-io/tidemark/internal/proc"
)

// Bounds on the life of one broker process: how long it may take to
// accept connections, and to exit after SIGTERM before it is killed.
const (
	childReadyTimeout = 10 * time.Second
	childStopTimeout  = 10 * time.Second
)

// childProc is one broker running as a process of its own.
type childProc struct {
	*proc.Proc
	name    string // for messages: mosquitto, tidemark
	logPath string
	logf    *os.File
	log     *slog.Logger
	line    func(*slog.Logger, string) // passes on the log lines that matter
}

// startChild starts bin with args in dir, its output in dir/<name>.log.
func startChild(name, bin string, args []string, dir string, log *slog.Logger, line func(*slog.Logger, string)) (*childProc, error) {
	p := &childProc{name: name, logPath: filepath.Join(dir, name+".log"), log: log, line: line}
	var err error
	if p.logf, err = os.Create(p.logPath); err != nil {
		return nil, err
	}
	if p.Proc, err = proc.Start(proc.Spec{Name: name, Bin: bin, Args: args, Dir: dir, Log: p.logf}); err != nil {
		p.logf.Close()
		return nil, err
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
	return p.WaitListen(ctx, addr, childReadyTimeout, func(ctx context.Context, addr string) error {
		c, err := dial(ctx, addr, "mqttbench-ready", false)
		if err == nil {
			c.close()
		}
		return err
	})
}

func (p *childProc) exitedEarly() bool { return !p.Running() }

// stop ends the process (SIGTERM, then SIGKILL after childStopTimeout)
// and passes on what it logged. It fails if the process had already
// exited, exits with an error, or needed SIGKILL.
func (p *childProc) stop() error {
	defer p.forwardLog()
	defer p.logf.Close()
	return p.Stop(childStopTimeout)
}

// logTail is the end of the process's log, for error messages.
func (p *childProc) logTail() string {
	if t := p.LogTail(30); t != "" {
		return "; log " + p.logPath + ":\n" + t
	}
	return ""
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
