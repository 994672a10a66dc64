// Package retention keeps messages in the broker's message log by topic
// filter (Options.Retention, serve --retention): it parses the rules,
// locates each rule's messages in the log, and tells the broker how low
// the log may be cut.
//
// A rule keeps at least the messages of its filter it names (by age,
// count or size) in the message log, for replay and for sessions,
// whatever the sessions have received. The message log is one ordered log
// cut below a position, so a message is removed once no rule, no session
// and no Options.History needs it or anything before it: messages of other
// topics older than the oldest one a rule keeps stay as well.
//
// A Set knows where each rule's messages are from an index the router
// feeds as it reads the log: per rule, a few hundred buckets of
// consecutive matching messages (first log key, count, bytes, times), so
// a rule costs a bounded amount of memory whatever its rate. After a
// restart the index is rebuilt by one read of the retained log (Seed).
//
// The invariant a Set keeps: until it is seeded, Floor reports nothing
// (so retention removes nothing), and once seeded, the cursor Floor
// returns is never above the oldest message any rule still keeps.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// Rule keeps at least some of the messages whose topic matches
// Filter in the message log: those younger than Age, or the newest
// Messages of them, or the newest Bytes of them (stored size). Exactly
// one of the three is set.
type Rule struct {
	Filter   string        `json:"filter"`
	Age      time.Duration `json:"age,omitempty"`
	Messages int64         `json:"messages,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
}

// ErrRule reports a retention rule that cannot be parsed or used.
var ErrRule = errors.New("mqtt: bad retention rule")

// String formats the rule as Parse reads it.
func (r Rule) String() string { return r.Filter + "=" + r.Amount() }

// Amount formats what the rule keeps: 24h0m0s, 10000msgs, 104857600B.
func (r Rule) Amount() string {
	switch {
	case r.Age > 0:
		return r.Age.String()
	case r.Messages > 0:
		return strconv.FormatInt(r.Messages, 10) + "msgs"
	}
	return strconv.FormatInt(r.Bytes, 10) + "B"
}

// Check reports, wrapping ErrRule, a rule without a valid topic filter
// or without exactly one positive age, message count or size.
func (r Rule) Check() error {
	n := 0
	for _, set := range []bool{r.Age > 0, r.Messages > 0, r.Bytes > 0} {
		if set {
			n++
		}
	}
	switch {
	case !topic.ValidFilter(r.Filter) || r.Filter == "":
		return fmt.Errorf("%w: %q is not a topic filter", ErrRule, r.Filter)
	case n != 1 || r.Age < 0 || r.Messages < 0 || r.Bytes < 0:
		return fmt.Errorf("%w: %s: give one positive age, message count or size", ErrRule, r.Filter)
	}
	return nil
}

// byteUnits are the size suffixes Parse accepts, longest first.
var byteUnits = []struct {
	suffix string
	n      int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}

// Parse parses comma-separated rules filter=amount, where amount
// is a duration (24h, 90m, or days: 7d), a message count (10000msgs) or a
// size (512MiB, 2GB, 100KB, 4096B): "sensors/#=24h,logs/#=10000msgs". A
// filter containing "," or "=" cannot be written in this form.
func Parse(s string) ([]Rule, error) {
	var rules []Rule
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		filter, amount, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %q: use filter=amount, such as sensors/#=24h, logs/#=10000msgs or big/#=512MiB", ErrRule, part)
		}
		r, err := parseAmount(strings.TrimSpace(filter), strings.TrimSpace(amount))
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseAmount(filter, a string) (Rule, error) {
	r := Rule{Filter: filter}
	bad := fmt.Errorf("%w: %s=%s: the amount is a duration (24h, 7d), a message count (10000msgs) or a size (512MiB, 2GB)", ErrRule, filter, a)
	switch {
	case strings.HasSuffix(a, "msgs"):
		n, err := strconv.ParseInt(strings.TrimSuffix(a, "msgs"), 10, 64)
		if err != nil {
			return r, bad
		}
		r.Messages = n
	case strings.HasSuffix(a, "d"):
		n, err := strconv.ParseFloat(strings.TrimSuffix(a, "d"), 64)
		if err != nil {
			return r, bad
		}
		r.Age = time.Duration(n * float64(24*time.Hour))
	case strings.HasSuffix(a, "B"):
		for _, u := range byteUnits {
			if num, ok := strings.CutSuffix(a, u.suffix); ok {
				n, err := strconv.ParseInt(num, 10, 64)
				if err != nil {
					return r, bad
				}
				r.Bytes = n * u.n
				break
			}
		}
	default:
		d, err := time.ParseDuration(a)
		if err != nil {
			return r, bad
		}
		r.Age = d
	}
	if err := r.Check(); err != nil {
		return r, err
	}
	return r, nil
}

// ruleBuckets is how many buckets a count or size rule aims at: a rule
// keeps at most about 1/ruleBuckets more than it asks for.
const ruleBuckets = 128

// logRun is a run of consecutive messages matching one rule.
type logRun struct {
	first       engine.LogKey // log key of its first message
	count       int64
	bytes       int64
	oldest, end time.Time // times of its first and last messages
}

// ruleIndex locates one rule's messages in the log.
type ruleIndex struct {
	rule    Rule
	buckets []logRun
	count   int64 // messages in buckets
	bytes   int64
}

// add notes a matching message at key, written at t, of size bytes.
func (x *ruleIndex) add(key engine.LogKey, t time.Time, size int64) {
	if n := len(x.buckets); n > 0 && x.fits(&x.buckets[n-1], t) {
		b := &x.buckets[n-1]
		b.count++
		b.bytes += size
		b.end = t
	} else {
		x.buckets = append(x.buckets, logRun{first: key, count: 1, bytes: size, oldest: t, end: t})
	}
	x.count++
	x.bytes += size
}

// fits reports whether a message at t may join b: age rules bucket by
// wall second, count and size rules by a share of what they keep.
func (x *ruleIndex) fits(b *logRun, t time.Time) bool {
	r := x.rule
	switch {
	case r.Age > 0:
		return t.Unix() == b.oldest.Unix()
	case r.Messages > 0:
		return b.count < max(1, r.Messages/ruleBuckets)
	}
	return b.bytes < max(1, r.Bytes/ruleBuckets)
}

// trim lets go of the buckets the rule no longer needs at now.
func (x *ruleIndex) trim(now time.Time) {
	r := x.rule
	i := 0
	for ; i < len(x.buckets); i++ {
		b := x.buckets[i]
		var drop bool
		switch {
		case r.Age > 0:
			drop = b.end.Before(now.Add(-r.Age))
		case r.Messages > 0:
			drop = x.count-b.count >= r.Messages
		default:
			drop = x.bytes-b.bytes >= r.Bytes
		}
		if !drop {
			break
		}
		x.count -= b.count
		x.bytes -= b.bytes
	}
	x.buckets = x.buckets[i:]
	if len(x.buckets) == 0 {
		x.buckets = nil
	}
}

// floor returns the cursor below which the log may go for this rule (its
// oldest kept message stays); false when it keeps nothing.
func (x *ruleIndex) floor() (table.Cursor, bool) {
	if len(x.buckets) == 0 {
		return table.Cursor{}, false
	}
	return table.Cursor{Key: x.buckets[0].first - 1}, true
}

// Set is the broker's retention rules and their indexes. A nil *Set (no
// rules) observes nothing and reports no stats.
type Set struct {
	msgs   string // the message log's table
	mu     sync.Mutex
	rules  []*ruleIndex
	seeded bool
	// upTo is the router's start: the seeding read covers the log up to
	// it, the router what follows.
	upTo table.Cursor
	// live holds what the router added before seeding ended, to go after
	// what the seeding read.
	live []*ruleIndex
}

// NewSet returns the indexes of rules over the message log in table
// msgs, not yet seeded; nil without rules.
func NewSet(msgs string, rules []Rule) *Set {
	if len(rules) == 0 {
		return nil
	}
	s := &Set{msgs: msgs}
	for _, r := range rules {
		s.rules = append(s.rules, &ruleIndex{rule: r})
		s.live = append(s.live, &ruleIndex{rule: r})
	}
	return s
}

// Start records the router's start: Seed reads the log up to head, and
// Observe is given what follows. Call it before the router runs.
func (s *Set) Start(head table.Cursor) { s.upTo = head }

// Observe notes one log message, from the router.
func (s *Set) Observe(ev table.Event) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := s.rules
	if !s.seeded {
		idx = s.live
	}
	for _, x := range idx {
		if topic.Match(x.rule.Filter, ev.ID) {
			x.add(ev.Key, ev.Version.Time(), int64(len(ev.Value)))
		}
	}
}

// Seed reads the retained message log up to the router's start into the
// indexes, then appends what the router added meanwhile.
func (s *Set) Seed(ctx context.Context, db *table.DB) error {
	if s == nil {
		return nil
	}
	read, err := readRules(ctx, db, s.msgs, s.rules, s.upTo)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range read {
		l := s.live[i]
		x.buckets = append(x.buckets, l.buckets...)
		x.count += l.count
		x.bytes += l.bytes
		x.trim(time.Now())
	}
	s.rules, s.live, s.seeded = read, nil, true
	return nil
}

// errDone stops the seeding read at the router's start.
var errDone = errors.New("done")

// readRules reads the retained message log (table msgs) up to upTo into
// new indexes of the rules of idx.
func readRules(ctx context.Context, db *table.DB, msgs string, idx []*ruleIndex, upTo table.Cursor) ([]*ruleIndex, error) {
	for {
		read := make([]*ruleIndex, len(idx))
		for i, x := range idx {
			read[i] = &ruleIndex{rule: x.rule}
		}
		st, err := db.LogStats(ctx)
		if err != nil {
			return nil, err
		}
		var from table.Cursor
		if st.Floor > 0 {
			from.Key = st.Floor - 1 // the retained log starts above it
		}
		_, err = db.Follow(ctx, table.SubscribeOptions{Table: msgs, Start: from, IncludeSuperseded: true,
			Hooks: table.Hooks{Live: func() bool { return false }}}, func(ev table.Event) error {
			if !upTo.Covers(ev.Key, ev.Index) {
				return errDone
			}
			for _, x := range read {
				if topic.Match(x.rule.Filter, ev.ID) {
					x.add(ev.Key, ev.Version.Time(), int64(len(ev.Value)))
				}
			}
			return nil
		})
		switch {
		case err == nil || errors.Is(err, errDone):
			return read, nil
		case errors.Is(err, table.ErrHistoryUnavailable) && ctx.Err() == nil:
			continue // truncated while read: read what is left
		}
		return nil, err
	}
}

// Floor returns the lowest cursor any rule keeps the log above at now;
// ok is false while the indexes are not seeded (keep everything).
func (s *Set) Floor(now time.Time, low table.Cursor) (table.Cursor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.seeded {
		return table.Cursor{}, false
	}
	for _, x := range s.rules {
		x.trim(now)
		if f, ok := x.floor(); ok && f.Less(low) {
			low = f
		}
	}
	return low, true
}

// Stat is what one retention rule keeps.
type Stat struct {
	Rule Rule `json:"rule"`
	// Messages and Bytes count the messages matching the rule that it
	// keeps in the log now (for a count or size rule, a little more than
	// asked: whole buckets); Oldest is the time of the oldest of them.
	Messages int64     `json:"messages"`
	Bytes    int64     `json:"bytes"`
	Oldest   time.Time `json:"oldest,omitzero"`
}

// Stats returns each rule's Stat (zero counts before seeding).
func (s *Set) Stats(now time.Time) []Stat {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Stat, 0, len(s.rules))
	for _, x := range s.rules {
		if s.seeded {
			x.trim(now)
		}
		st := Stat{Rule: x.rule, Messages: x.count, Bytes: x.bytes}
		if len(x.buckets) > 0 {
			st.Oldest = x.buckets[0].oldest
		}
		out = append(out, st)
	}
	return out
}

// tableConfig holds broker settings kept for offline tools (inspect).
const tableConfig = "mqtt.config"

// Save records the rules in db for Info; a broker without
// rules writes only to remove rules an earlier run saved.
func Save(ctx context.Context, db *table.DB, rules []Rule) error {
	tx := db.Begin()
	if len(rules) == 0 {
		_, err := db.Get(ctx, tableConfig, "retention")
		if errors.Is(err, table.ErrNotFound) {
			return nil
		}
		_ = tx.DeleteState(tableConfig, "retention")
	} else {
		v, err := json.Marshal(rules)
		if err != nil {
			return err
		}
		_ = tx.PutState(tableConfig, "retention", v)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("mqtt: save the retention rules: %w", err)
	}
	return nil
}

// Info reads the retention rules the broker last ran with on db and, by
// one read of the message log (table msgs), what each keeps there now:
// the matching messages, their bytes and the oldest one's time. For
// offline tools (tidemark inspect); no broker need run.
func Info(ctx context.Context, db *table.DB, msgs string) ([]Stat, error) {
	r, err := db.Get(ctx, tableConfig, "retention")
	if errors.Is(err, table.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rules []Rule
	if err := json.Unmarshal(r.Value, &rules); err != nil {
		return nil, fmt.Errorf("%w: stored rules: %w", ErrRule, err)
	}
	s := NewSet(msgs, rules)
	if s == nil {
		return nil, nil
	}
	if s.upTo, err = db.Head(ctx); err != nil {
		return nil, err
	}
	if err := s.Seed(ctx, db); err != nil {
		return nil, err
	}
	return s.Stats(time.Now()), nil
}
