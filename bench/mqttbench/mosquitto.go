package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tidemark-io/tidemark/internal/freeport"
)

// ErrNotInstalled reports that a peer broker the run asked for is not
// installed on this machine.
var ErrNotInstalled = errors.New("mqttbench: peer not installed")

// mosquittoSbin is where the Debian and Ubuntu package installs the
// broker, a directory that is not on every user's PATH.
const mosquittoSbin = "/usr/sbin/mosquitto"

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

func tryMosquitto(ctx context.Context, bin, dir string, log *slog.Logger) (_ *instance, portTaken bool, _ error) {
	port, err := freeport.Port()
	if err != nil {
		return nil, false, err
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(conf, []byte(mosquittoConfig(port, os.Geteuid() == 0)), 0o600); err != nil {
		return nil, false, err
	}
	p, err := startChild("mosquitto", bin, []string{"-c", conf}, dir, log, mosquittoLogLine)
	if err != nil {
		return nil, false, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := p.waitReady(ctx, addr); err != nil {
		if p.exitedEarly() {
			return nil, strings.Contains(p.logTail(), "in use"), err
		}
		return nil, false, errors.Join(err, p.stop())
	}
	return &instance{addr: addr, stop: p.stop, external: true, pid: p.Pid()}, false, nil
}

// mosquittoLogLine passes mosquitto's errors and warnings to the logger;
// the rest of its log is connection chatter. The warning about running
// as root is left out: the benchmark runs it as root on purpose (see
// mosquittoConfig).
func mosquittoLogLine(log *slog.Logger, line string) {
	// Each line is "<unix time>: <message>".
	_, msg, ok := strings.Cut(line, ": ")
	if !ok {
		msg = line
	}
	switch {
	case strings.Contains(msg, "should not be run as root"):
	case strings.HasPrefix(msg, "Error"):
		log.Error(msg)
	case strings.HasPrefix(msg, "Warning"):
		log.Warn(msg)
	}
}
