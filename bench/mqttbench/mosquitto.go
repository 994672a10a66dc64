package mqttbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/internal/freeport"
)

// ErrNotInstalled reports that a peer broker the run asked for is not
// installed on this machine.
var ErrNotInstalled = errors.New("mqttbench: peer not installed")

// mosquittoSbin is where the Debian and Ubuntu package installs the
// broker, a directory that is not on every user's PATH.
const mosquittoSbin = "/usr/sbin/mosquitto"

// Bounds on the life of one mosquitto process: how long it may take to
// accept connections, and to exit after SIGTERM before it is killed.
const (
	mosquittoReadyTimeout = 10 * time.Second
	mosquittoStopTimeout  = 10 * time.Second
)

// findMosquitto returns the mosquitto executable on PATH, else fallback.
func findMosquitto(fallback string) (string, error) {
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat(fallback); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return fallback, nil
	}
	return "", fmt.Errorf("%w: no mosquitto on PATH or at %s; install it with `apt-get install mosquitto` (Debian and Ubuntu package mosquitto)",
		ErrNotInstalled, fallback)
}

// mosquittoTarget runs the mosquitto executable at bin as a child process,
// one per point, with persistence off.
func mosquittoTarget(bin string) Target {
	t := Target{Name: "mosquitto", Kind: KindMosquitto,
		Durability: "persistence off: messages live only in memory and nothing is written or fsynced during a run; " +
			"PUBACK goes out once the message is queued in memory for the online subscribers, PUBREC once it is held " +
			"in memory, PUBCOMP once PUBREL released it to them, so a process crash loses every acknowledged message " +
			"not yet delivered (with persistence on, mosquitto writes, fsyncs and renames its whole in-memory database " +
			"only every autosave_interval, 30 min by default, and at exit, never per message)"}
	t.start = func(ctx context.Context, dir string, log *slog.Logger) (*instance, error) {
		return startMosquitto(ctx, bin, dir, log.With("component", "mosquitto"))
	}
	return t
}

// mosquittoConfig is the configuration of one point's broker. Without
// limits on in-flight and queued messages mosquitto would drop messages at
// window 256 and over many connections: a QoS 1 PUBLISH past the incoming
// in-flight limit is acknowledged and discarded under MQTT 3.1.1, whose
// PUBACK carries no reason code, and QoS 1 and 2 messages past the queue
// limit are silently dropped.
func mosquittoConfig(port int, root bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listener %d 127.0.0.1\n", port)
	b.WriteString(`allow_anonymous true
persistence false
max_inflight_messages 0
max_queued_messages 0
max_queued_bytes 0
upgrade_outgoing_qos false
# Go's sockets, hence the other brokers', have Nagle's algorithm off.
set_tcp_nodelay true
sys_interval 0
log_dest stderr
log_type error
log_type warning
log_type notice
log_type information
`)
	if root {
		// Run as root, mosquitto would switch to the mosquitto user, and
		// the kernel drops the parent-death signal on a change of user.
		b.WriteString("user root\n")
	}
	return b.String()
}

// startMosquitto starts mosquitto on a free port, trying another port if
// something took the chosen one before mosquitto bound it.
func startMosquitto(ctx context.Context, bin, dir string, log *slog.Logger) (*instance, error) {
	var errs []error
	for range 3 {
		inst, portTaken, err := tryMosquitto(ctx, bin, dir, log)
		if err == nil {
			return inst, nil
		}
		errs = append(errs, err)
		if !portTaken || ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// mosquittoProc is one running mosquitto process.
type mosquittoProc struct {
	cmd     *exec.Cmd
	logPath string
	log     *slog.Logger
	exited  chan struct{} // closed once Wait returned
	waitErr error         // Wait's result; read only after exited
}

func tryMosquitto(ctx context.Context, bin, dir string, log *slog.Logger) (_ *instance, portTaken bool, _ error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, false, err
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(mosquittoConfig(port, os.Geteuid() == 0)), 0o600); err != nil {
		return nil, false, err
	}
	p := &mosquittoProc{logPath: filepath.Join(dir, "mosquitto.log"), log: log, exited: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, false, err
	}
	p.cmd = exec.Command(bin, "-c", conf)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = mosquittoProcAttr()
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
		return nil, false, fmt.Errorf("mosquitto: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := p.waitReady(ctx, addr); err != nil {
		if p.exitedEarly() {
			return nil, strings.Contains(p.logTail(), "in use"), err
		}
		return nil, false, errors.Join(err, p.stop())
	}
	return &instance{addr: addr, stop: p.stop}, false, nil
}

// waitReady returns once addr answers an MQTT CONNECT, or fails when the
// process exits, ctx ends or mosquittoReadyTimeout passes. A TCP accept is
// not enough: mosquitto listens before it enters its main loop, and a
// SIGTERM that arrives in between is lost (the loop starts by setting its
// run flag again), so a broker stopped right after a bare accept could
// run on. A CONNACK comes from the main loop.
func (p *mosquittoProc) waitReady(ctx context.Context, addr string) error {
	deadline := time.Now().Add(mosquittoReadyTimeout)
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
			return fmt.Errorf("mosquitto exited before accepting connections (%w)%s", p.waitErr, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mosquitto (pid %d) did not accept connections on %s within %v%s", p.cmd.Process.Pid, addr, mosquittoReadyTimeout, p.logTail())
		}
	}
}

func (p *mosquittoProc) exitedEarly() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop ends the process this proc started, by its handle (a pidfd where
// the OS has one, so never a process that reused the pid): SIGTERM, then
// SIGKILL after mosquittoStopTimeout. It fails if the process had already
// exited, exits with an error, or needed SIGKILL.
func (p *mosquittoProc) stop() error {
	defer p.forwardLog()
	if p.exitedEarly() {
		return fmt.Errorf("mosquitto (pid %d) exited before it was stopped (%w)%s", p.cmd.Process.Pid, p.waitErr, p.logTail())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("mosquitto (pid %d): SIGTERM: %w; killed", p.cmd.Process.Pid, err)
	}
	timer := time.NewTimer(mosquittoStopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			return fmt.Errorf("mosquitto (pid %d) after SIGTERM: %w%s", p.cmd.Process.Pid, p.waitErr, p.logTail())
		}
		return nil
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("mosquitto (pid %d) did not exit within %v of SIGTERM; killed%s", p.cmd.Process.Pid, mosquittoStopTimeout, p.logTail())
	}
}

// logTail is the end of the process's log, for error messages.
func (p *mosquittoProc) logTail() string {
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

// forwardLog passes mosquitto's errors and warnings to the logger; the
// rest of its log is connection chatter. The warning about running as
// root is left out: the benchmark runs it as root on purpose (see
// mosquittoConfig).
func (p *mosquittoProc) forwardLog() {
	f, err := os.Open(p.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		// Each line is "<unix time>: <message>".
		_, msg, ok := strings.Cut(line, ": ")
		if !ok {
			msg = line
		}
		switch {
		case strings.Contains(msg, "should not be run as root"):
		case strings.HasPrefix(msg, "Error"):
			p.log.Error(msg)
		case strings.HasPrefix(msg, "Warning"):
			p.log.Warn(msg)
		}
	}
}
