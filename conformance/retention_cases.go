package conformance

import (
	"fmt"
	"slices"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/packet"
)

// caseRetentionRulePerFilter (R08): with no session holding the log, a
// count rule keeps the newest messages of its filter and an age rule its
// young ones, while a topic no rule names goes; after a restart the rules
// find their messages again, and a replay from the oldest position
// delivers what they kept.
func caseRetentionRulePerFilter(t T, tg Target) {
	rules, err := mqtt.ParseRetention("keep/#=5msgs,young/#=1h")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	s := startBroker(t, tg, mqtt.Options{Retention: rules})
	publish := func(topic string, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := s.Broker().Publish(t.Context(), mqtt.Message{Topic: topic, QoS: 1, Payload: fmt.Appendf(nil, "%03d", i)}); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}
	publish("drop/b", 0, 3)
	publish("keep/x", 0, 12)
	publish("young/a", 0, 3)
	publish("drop/b", 3, 6)
	retainUntil := func(what string, done func() bool) {
		t.Helper()
		eventually(t, what, func() bool {
			if err := s.Broker().Retain(t.Context()); err != nil {
				t.Fatalf("retain: %v", err)
			}
			return done()
		})
	}
	check := func(keep, drop []string) {
		t.Helper()
		if got := logMessages(t, s.DB(), "keep/x"); !slices.Equal(got, keep) {
			t.Fatalf("keep/x retained %v, want %v", got, keep)
		}
		if got := logMessages(t, s.DB(), "young/a"); !slices.Equal(got, seqOf("", 0, 3)) {
			t.Fatalf("young/a retained %v, want 000..002", got)
		}
		if got := logMessages(t, s.DB(), "drop/b"); !slices.Equal(got, drop) {
			t.Fatalf("drop/b retained %v, want %v", got, drop)
		}
		st := s.Broker().Stats().Retention
		if len(st) != 2 || st[0].Rule.Filter != "keep/#" || st[0].Messages != 5 || st[1].Rule.Filter != "young/#" || st[1].Messages != 3 || st[1].Oldest.IsZero() {
			t.Fatalf("Stats().Retention = %+v, want keep/# keeping 5, young/# 3", st)
		}
	}
	retainUntil("the log cut for the rules", func() bool { return len(logMessages(t, s.DB(), "keep/x")) == 5 })
	check(seqOf("", 7, 12), seqOf("", 3, 6))

	// After a restart the rules find their messages in the log again.
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	publish("keep/x", 12, 15)
	retainUntil("the log cut after the restart", func() bool { return len(logMessages(t, s.DB(), "keep/x")) == 5 })
	check(seqOf("", 10, 15), seqOf("", 3, 6))

	// A replay from the oldest position delivers what the rules kept.
	sub := newReplayClient(t, s.Addr, "r08-sub", packet.V5, true, 0)
	ack := sub.subscribe(1, "keep/#", "0")
	var oldest string
	for _, u := range ack.Properties.User {
		if u.Key == mqtt.PropOldestPosition {
			oldest = u.Value
		}
	}
	if ack.ReasonCodes[0] != packet.ImplementationSpecificError || oldest == "" {
		t.Fatalf("replay from 0 after a cut: SUBACK %v (%q), want 0x83 with %s", ack.ReasonCodes, ack.Properties.ReasonString, mqtt.PropOldestPosition)
	}
	wantGranted(t, sub.subscribe(2, "keep/#", oldest))
	sub.takeUntil(5)
	if got := sub.payloads(); !slices.Equal(got, seqOf("", 10, 15)) {
		t.Fatalf("replay took %v, want 010..014", got)
	}
}
