package mqtt_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

// A shared group loses nothing to one slow member that then disconnects:
// what its full queue could not take goes to the other member at once,
// and what it held (queued, or sent and not acknowledged) goes to the
// other member when its connection ends. Every one of 2,100 QoS 1
// messages reaches the member that acknowledges, and none is dropped.
func TestSharedSlowMemberLosesNothing(t *testing.T) {
	s := startBroker(t)
	slow := subscribeRaw5(t, s.Addr, "unsent-slow", 1, "$share/g/un/#")
	fast := connect5(t, s.Addr, "unsent-fast", true, 0)
	fast.sub("$share/g/un/#", 1)

	const n = 2100 // past the slow member's queue of 1,024 and its window of 1
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range n {
		if err := s.Broker().Publish(ctx, mqtt.Message{Topic: "un/x", Payload: []byte(strconv.Itoa(i)), QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	first := slow.ReadPublish() // and never acknowledged
	got := map[string]bool{}
	deadline := time.After(wait)
	for len(got) < n-1100 { // the fast member's share and the slow one's overflow
		select {
		case m := <-fast.msgs:
			got[string(m.Payload)] = true
		case <-deadline:
			t.Fatalf("the fast member got %d messages while the slow one stalled", len(got))
		}
	}
	slow.Conn().Close()
	for len(got) < n {
		select {
		case m := <-fast.msgs:
			got[string(m.Payload)] = true
		case <-deadline:
			t.Fatalf("the fast member got %d of %d messages after the slow one left; the group lost the rest", len(got), n)
		}
	}
	if !got[string(first.Payload)] {
		t.Fatalf("the message the slow member did not acknowledge (%s) was not sent to the other", first.Payload)
	}
	if d := s.Broker().Stats().Dropped["slow"]; d != 0 {
		t.Fatalf("%d shared deliveries dropped as slow", d)
	}
}

// A shared group's only member leaving with messages it had not sent or
// had not had acknowledged: with no member to take them they are counted
// as dropped for that reason ("no_member", not "slow") and logged for
// the group. A message routed after the member's session ended waits in
// the group's queue until a retention pass finds no member and drops it,
// so the five may be logged in two lines. Passes run often here: at the
// default period of 10 s the wait saw two at most, and once, under the
// race detector, ended with two messages still queued.
func TestSharedLastMemberLeavingCountsNoMember(t *testing.T) {
	var logs logText
	s := startBroker(t, func(o *mqtt.Options) {
		o.Logger = logs.logger()
		o.RetentionEvery = 100 * time.Millisecond
	})
	slow := subscribeRaw5(t, s.Addr, "lone-slow", 1, "$share/lone/ln/#")
	const n = 5
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range n {
		if err := s.Broker().Publish(ctx, mqtt.Message{Topic: "ln/x", Payload: []byte(strconv.Itoa(i)), QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	slow.ReadPublish() // and never acknowledged; the rest wait for the window
	slow.Conn().Close()
	for deadline := time.Now().Add(2 * wait); s.Broker().Stats().Dropped["no_member"] < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dropped %v after %s, want no_member %d:\n%s", s.Broker().Stats().Dropped, 2*wait, n, logs.String())
		}
	}
	if st := s.Broker().Stats(); st.Dropped["no_member"] != n || st.Dropped["slow"] != 0 {
		t.Fatalf("dropped %v, want no_member %d and slow 0", st.Dropped, n)
	}
	logged := 0
	for _, m := range regexp.MustCompile(`dropped.* component=mqtt group=lone filter=ln/# messages=(\d+)`).FindAllStringSubmatch(logs.String(), -1) {
		k, _ := strconv.Atoi(m[1])
		logged += k
	}
	if logged != n {
		t.Fatalf("the log counts %d dropped messages, want %d:\n%s", logged, n, logs.String())
	}
}
