package mqtt_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

// TestRetentionKeepsWhatSessionsNeed: retention truncates the message log
// below the lowest persisted checkpoint, so an offline persistent session
// still receives everything queued for it, and the log shrinks once it
// caught up.
func TestRetentionKeepsWhatSessionsNeed(t *testing.T) {
	s := startBroker(t)
	b := s.Broker()
	sub := connect3(t, s.Addr, "ret-sub", false)
	sub.sub("ret/#", 1)
	sub.Disconnect(100)
	pub := connect3(t, s.Addr, "ret-pub", true)
	for i := 0; i < 20; i++ {
		pub.pub("ret/x", 1, false, fmt.Sprint(i))
	}
	if err := b.Retain(ctxT(t)); err != nil {
		t.Fatalf("retain: %v", err)
	}
	st, err := s.DB().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries < 20 {
		t.Fatalf("retention removed messages an offline session still needs: %d entries left", st.Entries)
	}
	sub = connect3(t, s.Addr, "ret-sub", false)
	ms := sub.expect(20)
	for i, m := range ms {
		if string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("message %d = %q", i, m.Payload())
		}
	}
	sub.Disconnect(100) // persists the checkpoint past all 20
	// The broker persists that checkpoint as it handles the DISCONNECT,
	// which the client does not wait for: retry until it has.
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		if err := b.Retain(ctxT(t)); err != nil {
			t.Fatalf("retain: %v", err)
		}
		st, err = s.DB().LogStats(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.Floor != 0 && st.Entries < 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log not truncated after every session caught up: %+v", st)
		}
	}
}

// TestRetentionLimitCutsLaggingSession: past MaxQueuedMessages an offline
// session loses its oldest messages and resumes with the newest ones.
func TestRetentionLimitCutsLaggingSession(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages = 5 })
	sub := connect3(t, s.Addr, "lag-sub", false)
	sub.sub("lag/#", 1)
	sub.Disconnect(100)
	pub := connect3(t, s.Addr, "lag-pub", true)
	for i := 0; i < 30; i++ {
		pub.pub("lag/x", 1, false, fmt.Sprint(i))
	}
	if err := s.Broker().Retain(ctxT(t)); err != nil {
		t.Fatalf("retain: %v", err)
	}
	sub = connect3(t, s.Addr, "lag-sub", false)
	for i, m := range sub.expect(5) {
		if got, want := string(m.Payload()), fmt.Sprint(25+i); got != want {
			t.Fatalf("message %d after the cut = %q, want %q", i, got, want)
		}
	}
	sub.expectNone(200 * time.Millisecond)
	if d := s.Broker().Stats().Dropped["retention"]; d != 25 {
		t.Fatalf("dropped by retention = %d, want 25", d)
	}
}

// TestRetentionAsksIdleSessionsSparingly: once the log moves past an
// online session that receives nothing, a retention pass truncates up to
// the session's acknowledged checkpoint, but asks the session to write
// that checkpoint only once its last write is six retention periods old,
// not at every pass: asking every online session at every pass would cost
// a commit per session and pass.
func TestRetentionAsksIdleSessionsSparingly(t *testing.T) {
	const every = time.Second
	s := startBroker(t, func(o *mqtt.Options) { o.RetentionEvery = every })
	b := s.Broker()
	idle := connect3(t, s.Addr, "idle", false)
	idle.sub("idle/only", 1)
	subscribed := time.Now()
	defer idle.close()
	version := func() uint64 {
		r, err := s.DB().Get(ctxT(t), "mqtt.sessions", "idle")
		if err != nil {
			t.Fatalf("session record: %v", err)
		}
		return uint64(r.Version)
	}
	pub := connect3(t, s.Addr, "other-pub", true)
	for i := range 10 {
		pub.pub("other/x", 1, false, fmt.Sprint(i))
	}
	v0 := version()
	for range 3 {
		if err := b.Retain(ctxT(t)); err != nil {
			t.Fatalf("retain: %v", err)
		}
	}
	if d := time.Since(subscribed); d >= 6*every {
		t.Fatalf("publishing 10 messages and three passes took %v, past the six periods this check needs", d)
	}
	if v := version(); v != v0 {
		t.Fatalf("the idle session's record was written again (version %d -> %d) by passes within six periods of its last write", v0, v)
	}
	st, err := s.DB().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Floor == 0 {
		t.Fatalf("log not truncated past the messages the idle session acknowledged by passing them: %+v", st)
	}
	time.Sleep(time.Until(subscribed.Add(6*every + every/2)))
	for deadline := time.Now().Add(wait); version() == v0; time.Sleep(50 * time.Millisecond) {
		if err := b.Retain(ctxT(t)); err != nil {
			t.Fatalf("retain: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle session was never asked to write its checkpoint again")
		}
	}
}
