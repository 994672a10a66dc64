package mqtt

import (
	"context"

	"github.com/tidemark-io/tidemark/mqtt/internal/message"
	"github.com/tidemark-io/tidemark/mqtt/internal/retention"
	"github.com/tidemark-io/tidemark/table"
)

// Retention by topic filter (Options.Retention, serve --retention) is
// package mqtt/internal/retention: the rules, the index locating each
// rule's messages in the message log, and the floor it keeps the log
// above. The names below are its public face.

// RetentionRule keeps at least some of the messages whose topic matches
// Filter in the message log: those younger than Age, or the newest
// Messages of them, or the newest Bytes of them (stored size). Exactly
// one of the three is set.
type RetentionRule = retention.Rule

// ErrRetentionRule reports a retention rule that cannot be parsed or used.
var ErrRetentionRule = retention.ErrRule

// ParseRetention parses comma-separated rules filter=amount, where amount
// is a duration (24h, 90m, or days: 7d), a message count (10000msgs) or a
// size (512MiB, 2GB, 100KB, 4096B): "sensors/#=24h,logs/#=10000msgs". A
// filter containing "," or "=" cannot be written in this form.
func ParseRetention(s string) ([]RetentionRule, error) { return retention.Parse(s) }

// RetentionStat is what one retention rule keeps.
type RetentionStat = retention.Stat

// RetentionInfo reads the retention rules the broker last ran with on db
// and, by one read of the message log, what each keeps there now: the
// matching messages, their bytes and the oldest one's time. For offline
// tools (tidemark inspect); no broker need run.
func RetentionInfo(ctx context.Context, db *table.DB) ([]RetentionStat, error) {
	return retention.Info(ctx, db, message.LogTable)
}
