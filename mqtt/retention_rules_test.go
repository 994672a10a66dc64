package mqtt_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

func TestParseRetention(t *testing.T) {
	got, err := mqtt.ParseRetention(" sensors/#=24h, logs/#=10000msgs,big/+/x=512MiB,week/#=7d,k=2KB ")
	if err != nil {
		t.Fatal(err)
	}
	want := []mqtt.RetentionRule{
		{Filter: "sensors/#", Age: 24 * time.Hour},
		{Filter: "logs/#", Messages: 10000},
		{Filter: "big/+/x", Bytes: 512 << 20},
		{Filter: "week/#", Age: 7 * 24 * time.Hour},
		{Filter: "k", Bytes: 2000},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	if s := got[1].String(); s != "logs/#=10000msgs" {
		t.Fatalf("String() = %q", s)
	}
	for _, bad := range []string{"sensors/#", "a/#=", "a/#=0msgs", "a/#=-1h", "a/#=12parsecs", "a/#/b=1h", "=1h", "a=1XB"} {
		if _, err := mqtt.ParseRetention(bad); !errors.Is(err, mqtt.ErrRetentionRule) {
			t.Errorf("ParseRetention(%q) = %v, want ErrRetentionRule", bad, err)
		}
	}
}

func seqStrings(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// TestRetentionRuleKeepsNewestMessages: with no session holding the log,
// a count rule keeps the newest messages of its filter (and what was
// published after the oldest of them), an age rule keeps its young
// messages, and the rest goes; after a restart the broker finds the
// rules' messages again before it removes anything.
func TestRetentionRuleKeepsNewestMessages(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) {
		o.Retention = []mqtt.RetentionRule{{Filter: "keep/#", Messages: 5}}
		o.RetentionEvery = 20 * time.Millisecond
	})
	pub := connect3(t, s.Addr, "rr-pub", true)
	for i := range 20 {
		pub.pub("keep/x", 1, false, fmt.Sprint(i))
		pub.pub("other/y", 1, false, fmt.Sprint(i))
	}
	pub.close()
	retainUntil := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(wait); !done(); time.Sleep(20 * time.Millisecond) {
			if err := s.Broker().Retain(ctxT(t)); err != nil {
				t.Fatalf("retain: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, wait)
			}
		}
	}
	// Retention runs every 20 ms, so it may already have cut while the
	// messages were being published (below the fifth newest of those then
	// there): wait for a pass after the last of them.
	cutToNewest := func() bool {
		keep := logPayloads(t, s.DB(), "keep/x")
		return len(keep) >= 5 && slices.Equal(keep[len(keep)-5:], seqStrings(15, 20)) && !slices.Contains(keep, "9")
	}
	retainUntil("log truncated to the newest five of keep/x", cutToNewest)
	check := func() {
		t.Helper()
		keep := logPayloads(t, s.DB(), "keep/x")
		if len(keep) < 5 || !slices.Equal(keep[len(keep)-5:], seqStrings(15, 20)) || slices.Contains(keep, "9") {
			t.Fatalf("keep/x retained %v, want the newest five (15..19) and none of 0..9", keep)
		}
		if other := logPayloads(t, s.DB(), "other/y"); slices.Contains(other, "9") || !slices.Contains(other, "19") {
			t.Fatalf("other/y retained %v: want what follows the oldest kept keep/x only", other)
		}
		st := s.Broker().Stats().Retention
		if len(st) != 1 || st[0].Rule.Filter != "keep/#" || st[0].Messages < 5 || st[0].Messages > 6 || st[0].Oldest.IsZero() {
			t.Fatalf("Stats().Retention = %+v, want keep/# keeping 5 messages", st)
		}
		info, err := mqtt.RetentionInfo(ctxT(t), s.DB())
		if err != nil || len(info) != 1 || info[0].Messages != st[0].Messages || info[0].Rule.Messages != 5 {
			t.Fatalf("RetentionInfo = %+v, %v; want the rule keeping %d messages", info, err, st[0].Messages)
		}
	}
	check()

	// After a restart: more messages, and the index is rebuilt from the
	// log before retention cuts again.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if st := s.Broker().Stats().Retention; len(st) != 1 {
		t.Fatalf("Stats().Retention after restart = %+v", st)
	}
	pub = connect3(t, s.Addr, "rr-pub", true)
	for i := 20; i < 30; i++ {
		pub.pub("other/y", 1, false, fmt.Sprint(i))
	}
	pub.close()
	retainUntil("the rules located after the restart", func() bool {
		st := s.Broker().Stats().Retention
		return len(st) == 1 && st[0].Messages >= 5
	})
	if err := s.Broker().Retain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	check()
}

// TestRetentionAgeRuleKeepsYoungMessages: an age rule keeps its young
// messages when no session needs them, which the log would otherwise
// drop at once.
func TestRetentionAgeRuleKeepsYoungMessages(t *testing.T) {
	for _, rule := range []string{"", "young/#=1h"} {
		t.Run(fmt.Sprintf("rule=%q", rule), func(t *testing.T) {
			rules, err := mqtt.ParseRetention(rule)
			if err != nil {
				t.Fatal(err)
			}
			s := startBroker(t, func(o *mqtt.Options) { o.Retention = rules; o.RetentionEvery = 20 * time.Millisecond })
			pub := connect3(t, s.Addr, "age-pub", true)
			for i := range 10 {
				pub.pub("young/x", 1, false, fmt.Sprint(i))
			}
			pub.close()
			if rule != "" {
				for deadline := time.Now().Add(wait); s.Broker().Stats().Retention[0].Messages < 10; time.Sleep(10 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("rule never saw the messages: %+v", s.Broker().Stats().Retention)
					}
				}
			}
			if err := s.Broker().Retain(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			got := logPayloads(t, s.DB(), "young/x")
			if rule == "" && len(got) == 10 {
				t.Fatalf("without a rule nothing was removed: %v", got)
			}
			if rule != "" && !slices.Equal(got, seqStrings(0, 10)) {
				t.Fatalf("with %s the log holds %v, want all ten", rule, got)
			}
		})
	}
}
