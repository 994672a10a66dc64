//go:build !nojetstream

package jetstream

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// Limits the embedded server is started with. maxPayload leaves room for
// a commit of driver.MaxBatchBytes as one transaction message;
// embeddedMaxBatch lets one commit of driver.MaxBatchEntries entries (plus
// check carriers) go out as one atomic batch.
const (
	maxPayload       = 48 << 20
	embeddedMaxBatch = 2 * driver.MaxBatchEntries
	// externalMaxBatch is the server default for an atomic batch; an
	// external server with a lower limit is discovered from its error.
	externalMaxBatch = 1000
)

// startEmbedded starts a JetStream-enabled nats-server that stores under
// dir and, with listen, accepts connections on 127.0.0.1 (random port);
// without, only in-process ones. Its fsync policy follows
// the engine's sync mode (see the package doc).
//
// onWriteErr is called with the server's message when its store fails a
// write (see space.go).
func startEmbedded(opts driver.Options, log *slog.Logger, listen bool, onWriteErr func(string)) (*server.Server, error) {
	sopts := &server.Options{
		ServerName: "tidemark-embedded",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		NoSigs:     true,
		JetStream:  true,
		StoreDir:   filepath.Join(opts.Dir, "nats"),
		MaxPayload: maxPayload,
		DontListen: !listen,
	}
	sopts.JetStreamLimits.MaxBatchSize = embeddedMaxBatch
	// The limit the server would derive from the free space at start
	// stops a full stream for good; the engine's space guard keeps the
	// disk from filling instead (see space.go).
	sopts.JetStreamMaxStore = embeddedMaxStore
	switch opts.Sync {
	case driver.SyncAlways:
		sopts.SyncAlways = true
	case driver.SyncInterval:
		sopts.SyncInterval = opts.Interval()
	}
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("jetstream: embedded server: %w", err)
	}
	s.SetLoggerV2(serverLogger{l: log.With("component", "nats-server"), onWriteErr: onWriteErr}, false, false, false)
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("jetstream: embedded server in %s did not become ready", sopts.StoreDir)
	}
	return s, nil
}

// stopEmbedded shuts the server down and waits until its store is closed.
func stopEmbedded(s *server.Server) {
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// serverLogger routes nats-server logs to slog. The server's notices are
// routine start/stop chatter, so they go to debug level, except the one
// saying it dropped a client as a slow consumer: on the embedded server
// that client is the engine itself, and the notice is the only place that
// says why its connection went. Fatalf is only logged: the engine reports
// failures through its errors, never by exiting. A store's "critical write
// error" is also handed to onWriteErr: the server reports it nowhere else.
type serverLogger struct {
	l          *slog.Logger
	onWriteErr func(string)
}

func (l serverLogger) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.Contains(msg, "Slow Consumer") {
		l.l.Warn(msg)
		return
	}
	l.l.Debug(msg)
}
func (l serverLogger) Warnf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if strings.HasPrefix(msg, "Maximum payloads over") {
		// The limit is raised on purpose: one commit is one message.
		l.l.Debug(msg)
		return
	}
	l.l.Warn(msg)
}
func (l serverLogger) Fatalf(format string, v ...any) { l.l.Error(fmt.Sprintf(format, v...)) }
func (l serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.l.Error(msg)
	if l.onWriteErr != nil && strings.Contains(strings.ToLower(msg), "critical write error") {
		l.onWriteErr(msg)
	}
}
func (l serverLogger) Debugf(format string, v ...any) {}
func (l serverLogger) Tracef(format string, v ...any) {}
