package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/table"
)

// Replay on subscribe (see docs/replay.md). A subscription that asks for
// history gets its own reader over the message log from the requested
// position, filtered by its topic filter. While that reader runs, the
// session's live deliveries for the filter are held back (the sender
// passes over them, noting the highest one); once the reader has covered
// the log up to where the subscription joined the live route and past
// every message held back, the filter's since position moves to where
// the reader stopped and live delivery takes over. The replay therefore
// ends exactly where live delivery starts: no gap, no duplicate.
//
// The replay's acknowledged checkpoint bounds the session's persisted
// checkpoint, and the filter's persisted since position is the replay's
// checkpoint, so a broker restart or reconnect in the middle of a replay
// resumes it through the session's ordinary catch-up, from the first
// message the client did not acknowledge.

const (
	// PropReplayFrom is the user property of a 5.0 SUBSCRIBE asking its
	// subscriptions to replay the message log from a point: an RFC 3339
	// time, a negative duration such as "-15m", or a position a delivery
	// carried in PropPosition (exclusive: replay starts after it).
	PropReplayFrom = "tidemark-replay-from"
	// PropPosition is the user property carrying a delivered message's
	// log position, on every message a replaying subscription receives
	// (5.0), replayed or live. Passed back in PropReplayFrom, it resumes
	// right after that message.
	PropPosition = "tidemark-position"
	// PropOldestPosition is the user property of a SUBACK refusing a
	// replay older than the retained log: replaying from it delivers
	// every message still retained.
	PropOldestPosition = "tidemark-oldest-position"
	// ReplayPrefix is the topic-filter prefix asking for a replay where
	// there are no user properties (3.1.1): "$replay/<from>/<filter>".
	ReplayPrefix = "$replay/"
)

// ErrReplayFrom reports a replay start that cannot be parsed.
var ErrReplayFrom = errors.New("mqtt: bad replay start")

// ErrReplayTruncated reports a replay start older than the retained log.
var ErrReplayTruncated = errors.New("mqtt: replay start older than the retained log")

// replayStart is where a replay begins: after a log position, and from
// messages written at or after a time (zero: any).
type replayStart struct {
	after table.Cursor
	since time.Time
}

// parseReplayFrom parses the value of PropReplayFrom or of the <from>
// level of ReplayPrefix, relative to now.
func parseReplayFrom(s string, now time.Time) (replayStart, error) {
	switch {
	case s == "":
		return replayStart{}, fmt.Errorf("%w: empty: use an RFC 3339 time, a negative duration such as -15m, or a %s value", ErrReplayFrom, PropPosition)
	case s[0] == '-':
		d, err := time.ParseDuration(s)
		if err != nil || d >= 0 {
			return replayStart{}, fmt.Errorf("%w: %q is not a negative duration (such as -15m or -2h30m)", ErrReplayFrom, s)
		}
		return replayStart{since: now.Add(d)}, nil
	case s[0] >= '0' && s[0] <= '9' && !strings.ContainsAny(s, "-:T"):
		var c table.Cursor
		if err := c.UnmarshalText([]byte(s)); err != nil {
			return replayStart{}, fmt.Errorf("%w: %q is not a %s value: %w", ErrReplayFrom, s, PropPosition, err)
		}
		return replayStart{after: c}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return replayStart{}, fmt.Errorf("%w: %q: use an RFC 3339 time (2026-01-02T15:04:05Z), a negative duration such as -15m, or a %s value", ErrReplayFrom, s, PropPosition)
	}
	return replayStart{since: t}, nil
}

// cutReplayPrefix splits "$replay/<from>/<filter>"; ok is false when
// filter has no such prefix.
func cutReplayPrefix(filter string) (from, inner string, ok bool, err error) {
	rest, ok := strings.CutPrefix(filter, ReplayPrefix)
	if !ok {
		return "", filter, false, nil
	}
	from, inner, found := strings.Cut(rest, "/")
	if !found || inner == "" {
		return "", "", true, fmt.Errorf("%w: %q: use %s<from>/<filter>, for example %s-15m/sensors/#", ErrReplayFrom, filter, ReplayPrefix, ReplayPrefix)
	}
	return from, inner, true, nil
}

// truncatedError is a replay start the retained log no longer reaches,
// with the oldest position it does.
type truncatedError struct {
	asked  string
	oldest table.Cursor
}

func (e *truncatedError) Error() string {
	return fmt.Sprintf("%s: %s is older than the retained log; the oldest available position is %s (replay from it, or configure a longer history)",
		ErrReplayTruncated, e.asked, e.oldest)
}

func (e *truncatedError) Unwrap() error { return ErrReplayTruncated }

// errFound stops a scan at the first event.
var errFound = errors.New("found")

// resolveReplay checks a replay start against retention: it fails with a
// *truncatedError when messages it asks for may have been removed.
func (b *Broker) resolveReplay(ctx context.Context, asked string, rs replayStart) error {
	st, err := b.db.LogStats(ctx)
	if err != nil {
		return err
	}
	if st.Floor == 0 {
		return nil // nothing was ever removed
	}
	oldest := table.Cursor{Key: st.Floor - 1}
	if rs.since.IsZero() {
		if rs.after.Less(oldest) {
			return &truncatedError{asked: asked, oldest: oldest}
		}
		return nil
	}
	// A time start reaches back far enough if the oldest retained message
	// is no newer than it: whatever was removed was older still.
	var first table.Event
	found := false
	_, err = b.db.Follow(ctx, table.SubscribeOptions{Table: tableMsgs, Start: oldest, IncludeSuperseded: true,
		Hooks: table.Hooks{Live: func() bool { return false }}}, func(ev table.Event) error {
		first, found = ev, true
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return err
	}
	if !found || rs.since.Before(first.Version.Time()) {
		return &truncatedError{asked: asked, oldest: oldest}
	}
	return nil
}
