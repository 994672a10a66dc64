package broker

import (
	"context"
	"log/slog"
)

// connLog logs on behalf of one connection, adding its remote address
// and client id to each record. It builds them only for a record that
// is written: a logger made with With for every connection would cost a
// fleet of idle ones hundreds of bytes each, for lines most never log.
type connLog struct{ c *conn }

// Enabled reports whether a record at level would be written: a caller
// whose arguments cost an allocation checks first.
func (l connLog) Enabled(level slog.Level) bool {
	return l.c.b.log.Enabled(context.Background(), level)
}

// Debug logs at slog.LevelDebug.
func (l connLog) Debug(msg string, args ...any) { l.log(slog.LevelDebug, msg, args) }

// Info logs at slog.LevelInfo.
func (l connLog) Info(msg string, args ...any) { l.log(slog.LevelInfo, msg, args) }

// Warn logs at slog.LevelWarn.
func (l connLog) Warn(msg string, args ...any) { l.log(slog.LevelWarn, msg, args) }

// Error logs at slog.LevelError.
func (l connLog) Error(msg string, args ...any) { l.log(slog.LevelError, msg, args) }

func (l connLog) log(level slog.Level, msg string, args []any) {
	lg := l.c.b.log
	ctx := context.Background()
	if !lg.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, 4+len(args))
	if ra := l.c.nc.RemoteAddr(); ra != nil {
		attrs = append(attrs, "remote", ra.String())
	}
	if l.c.client != "" {
		attrs = append(attrs, "client", l.c.client)
	}
	lg.Log(ctx, level, msg, append(attrs, args...)...)
}
