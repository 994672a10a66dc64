//go:build !nojetstream

package mqttbench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tidemark-io/tidemark/engine"
)

// natsOmitted is empty: this build has the nats peer.
const natsOmitted = ""

// natsDefaultSync is JetStream's file-store sync interval when none is
// configured.
const natsDefaultSync = 2 * time.Minute

// natsTarget runs an embedded nats-server with JetStream on a file store
// and its MQTT listener. Its fsync policy is set explicitly from mode:
// always → sync_always, interval → sync_interval, none → JetStream's
// default interval.
func natsTarget(mode engine.SyncMode, interval time.Duration) Target {
	const ack = "JetStream file store; PUBACK after the message is stored in $MQTT_msgs, PUBREC after it is staged in $MQTT_qos2in, PUBCOMP after the release stores it for delivery"
	var dur string
	switch mode {
	case engine.SyncAlways:
		dur = ack + "; sync_always: fsynced before the acknowledgement"
	case engine.SyncInterval:
		dur = ack + "; sync_interval " + interval.String() + ": written to the OS before the acknowledgement, fsynced every " + interval.String()
	default:
		dur = ack + "; sync_interval left at the JetStream default (" + natsDefaultSync.String() + "): an OS crash can lose minutes of acknowledged messages"
	}
	t := Target{Name: "nats-server", Kind: KindNATS, Sync: mode.String(), Durability: dur}
	t.start = func(ctx context.Context, dir string, log *slog.Logger) (*instance, error) {
		return startNATS(ctx, dir, "127.0.0.1:0", mode, interval, log)
	}
	t.startOn = func(ctx context.Context, dir, addr string, log *slog.Logger) (*instance, error) {
		return startNATS(ctx, dir, addr, mode, interval, log)
	}
	return t
}

// startNATS starts nats-server with its MQTT listener on mqttAddr (port 0:
// any free one).
func startNATS(ctx context.Context, dir, mqttAddr string, mode engine.SyncMode, interval time.Duration, log *slog.Logger) (*instance, error) {
	host, port, err := net.SplitHostPort(mqttAddr)
	if err != nil {
		return nil, fmt.Errorf("nats-server: MQTT address %q: %w", mqttAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("nats-server: MQTT address %q: %w", mqttAddr, err)
	}
	if p == 0 {
		p = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "mqttbench",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		HTTPPort:   0,
		NoSigs:     true,
		JetStream:  true,
		StoreDir:   dir,
		MQTT:       server.MQTTOpts{Host: host, Port: p},
	}
	switch mode {
	case engine.SyncAlways:
		opts.SyncAlways = true
	case engine.SyncInterval:
		opts.SyncInterval = interval
	default:
		opts.SyncInterval = natsDefaultSync
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	s.SetLoggerV2(natsLogger{log.With("component", "nats-server")}, false, false, false)
	s.Start()
	stop := func() error {
		s.Shutdown()
		s.WaitForShutdown()
		return nil
	}
	wait := 30 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if !s.ReadyForConnections(wait) {
		_ = stop()
		return nil, fmt.Errorf("nats-server in %s did not become ready in %v", dir, wait)
	}
	v, err := s.Varz(nil)
	if err != nil || v.MQTT.Port <= 0 {
		_ = stop()
		return nil, fmt.Errorf("nats-server: no MQTT port (%w)", err)
	}
	return &instance{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(v.MQTT.Port)), stop: stop}, nil
}

// natsLogger routes nats-server's logs to slog; its notices are start and
// stop chatter, so they go to debug.
type natsLogger struct{ l *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.l.Debug(fmt.Sprintf(format, v...)) }
func (l natsLogger) Warnf(format string, v ...any)   { l.l.Warn(fmt.Sprintf(format, v...)) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Errorf(format string, v ...any)  { l.l.Error(fmt.Sprintf(format, v...)) }
func (l natsLogger) Debugf(format string, v ...any)  {}
func (l natsLogger) Tracef(format string, v ...any)  {}
