package mqtt_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/mqtt"
)

// quietSized returns the publications of n messages of size payload
// bytes to quiet/a (payloads payloadOf(i, size)), each after every small
// messages to busy/b.
func quietSized(n, size, every int) [][2]string {
	var out [][2]string
	for i := range n {
		for j := range every {
			out = append(out, [2]string{"busy/b", fmt.Sprintf("b%d", i*every+j)})
		}
		out = append(out, [2]string{"quiet/a", payloadOf(i, size)})
	}
	return out
}

// wantSized returns "quiet/a=" and payloadOf(i, size) for i in [from, to).
func wantSized(from, to, size int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, "quiet/a="+payloadOf(i, size))
	}
	return out
}

// TestQueuedBytesKeepsNewestThatFit: an offline session whose own
// messages' payloads sum to more than Options.MaxQueuedBytes keeps the
// newest of them that fit, in order; the others count as dropped by
// retention and as hits of the byte limit, and the log below the oldest
// kept one goes. Messages of other topics do not count against it.
func TestQueuedBytesKeepsNewestThatFit(t *testing.T) {
	const size = 100
	for _, v := range queueSubs {
		t.Run(v.name, func(t *testing.T) {
			s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedBytes = 1050 })
			sub := v.connect(t, s.Addr, "qb-sub")
			sub.sub("quiet/a", 1)
			sub.close()
			pub := connect3(t, s.Addr, "qb-pub", true)
			pub.pubBurst(1, quietSized(30, size, 20)...) // 600 to busy/b, 30 of 100 bytes to quiet/a
			pub.close()
			// 1,050 bytes hold the newest ten of 100: a20..a29.
			retainDown(t, s, logKey(t, s.DB(), "quiet/a", payloadOf(20, size)))
			st := s.Broker().Stats()
			if d := st.Dropped["retention"]; d != 20 {
				t.Fatalf("dropped by retention = %d, want 20", d)
			}
			if h := st.LimitHits["queued_bytes"]; h != 20 {
				t.Fatalf("queued_bytes limit hits = %d, want 20", h)
			}
			retainAgain(t, s)
			sub = v.connect(t, s.Addr, "qb-sub")
			if got, want := sub.payloads(10), wantSized(20, 30, size); !slices.Equal(got, want) {
				t.Fatalf("received %v, want %v", got, want)
			}
			sub.none(200 * time.Millisecond)
		})
	}
}

// TestQueuedBytesWithMessageLimit: with both limits an offline session
// keeps the newest messages that fit both; what the message limit alone
// drops is not counted against the byte limit, and a message larger than
// the byte limit is not kept at all.
func TestQueuedBytesWithMessageLimit(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages, o.MaxQueuedBytes = 8, 650 })
	sub := queueSub3{connect3(t, s.Addr, "qbm-sub", false)}
	sub.sub("quiet/a", 1)
	sub.close()
	pub := connect3(t, s.Addr, "qbm-pub", true)
	pub.pubBurst(1, quietSized(20, 100, 5)...)
	pub.close()
	// Eight by count, six of 100 bytes by size: a14..a19.
	retainDown(t, s, logKey(t, s.DB(), "quiet/a", payloadOf(14, 100)))
	st := s.Broker().Stats()
	if d, h := st.Dropped["retention"], st.LimitHits["queued_bytes"]; d != 14 || h != 2 {
		t.Fatalf("dropped by retention %d, queued_bytes hits %d; want 14 and 2", d, h)
	}
	c := connect3(t, s.Addr, "qbm-sub", false)
	if got, want := (queueSub3{c}).payloads(6), wantSized(14, 20, 100); !slices.Equal(got, want) {
		t.Fatalf("received %v, want %v", got, want)
	}
	c.expectNone(200 * time.Millisecond)
	c.close()

	// One message over the byte limit on its own: the session keeps
	// none of it, and the log below the head goes.
	pub = connect3(t, s.Addr, "qbm-pub", true)
	pub.pubBurst(1, [2]string{"quiet/a", payloadOf(99, 700)}, [2]string{"busy/b", "after"})
	pub.close()
	waitFor(t, "the large message dropped", func() bool {
		retainOnce(t, s)
		return s.Broker().Stats().Dropped["retention"] == 15
	})
	if h := s.Broker().Stats().LimitHits["queued_bytes"]; h != 3 {
		t.Fatalf("queued_bytes hits = %d, want 3", h)
	}
	c = connect3(t, s.Addr, "qbm-sub", false)
	c.expectNone(300 * time.Millisecond)
}

// TestDefaultsUnpinTheLog: with default options a 3.1.1 persistent
// session whose client never returns holds the message log only until
// its session expires (DefaultSessionExpiry), after which retention cuts
// the log above its checkpoint; a client that returns within it finds
// everything queued.
func TestDefaultsUnpinTheLog(t *testing.T) {
	s := startBroker(t)
	if o := s.Broker().Options(); o.SessionExpiry != mqtt.DefaultSessionExpiry || o.MaxQueuedMessages != mqtt.DefaultMaxQueuedMessages {
		t.Fatalf("default session expiry %v and queue limit %d, want %v and %d",
			o.SessionExpiry, o.MaxQueuedMessages, mqtt.DefaultSessionExpiry, mqtt.DefaultMaxQueuedMessages)
	}
	for _, id := range []string{"gone", "back"} {
		c := connect3(t, s.Addr, id, false)
		c.sub("pin/t", 1)
		c.close()
	}
	pub := connect3(t, s.Addr, "pin-pub", true)
	var pubs [][2]string
	for i := range 10 {
		pubs = append(pubs, [2]string{"pin/t", fmt.Sprintf("p%d", i)}, [2]string{"other/x", fmt.Sprintf("o%d", i)})
	}
	pub.pubBurst(1, pubs...)
	pub.close()
	first := logKey(t, s.DB(), "pin/t", "p0")
	retainOnce(t, s)
	if st, err := s.DB().LogStats(ctxT(t)); err != nil || st.First > first {
		t.Fatalf("log starts at %d (%v): the offline sessions' messages from %d were cut", st.First, err, first)
	}
	back := connect3(t, s.Addr, "back", false)
	if got := (queueSub3{back}).payloads(10); len(got) != 10 || got[0] != "pin/t=p0" || got[9] != "pin/t=p9" {
		t.Fatalf("returning session received %v, want p0..p9", got)
	}
	back.close()
	waitFor(t, "every client gone", func() bool {
		on, _, err := s.Broker().SessionCounts(ctxT(t))
		return err == nil && on == 0
	})

	// A week and a bit later "back" has expired too, having left; "gone"
	// never came back. Nothing holds the log any more.
	later := time.Now().Add(mqtt.DefaultSessionExpiry + time.Hour)
	if err := s.Broker().ExpireSessionsAt(ctxT(t), later); err != nil {
		t.Fatalf("expire: %v", err)
	}
	if _, off, err := s.Broker().SessionCounts(ctxT(t)); err != nil || off != 0 {
		t.Fatalf("offline sessions after their expiry: %d (%v)", off, err)
	}
	last := logKey(t, s.DB(), "other/x", "o9")
	waitFor(t, "the log cut above the gone session's checkpoint", func() bool {
		retainOnce(t, s)
		st, err := s.DB().LogStats(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		return st.Entries == 0 || st.First >= last
	})
	if got := logPayloads(t, s.DB(), "pin/t"); len(got) == 10 {
		t.Fatalf("log still holds every message of the expired sessions: %v", got)
	}
}

// sizedFrom is quietAndBusyFrom with payloads of 100 bytes:
// payloadOf(aN+i, 100) to quiet/a, each after every payloadOf(bN+..., 100)
// to busy/b.
func sizedFrom(aN, bN, n, every int) [][2]string {
	var out [][2]string
	for i := range n {
		for j := range every {
			out = append(out, [2]string{"busy/b", payloadOf(bN+i*every+j, 100)})
		}
		out = append(out, [2]string{"quiet/a", payloadOf(aN+i, 100)})
	}
	return out
}

// TestQueuedBytesManySessionsManyPasses: under the byte limit alone,
// sessions at different positions, counted over several passes from
// what earlier passes counted, each keep exactly the newest of their
// messages that fit.
func TestQueuedBytesManySessionsManyPasses(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.MaxQueuedMessages, o.MaxQueuedBytes = -1, 2000 })
	for _, c := range [][2]string{{"early-a", "quiet/a"}, {"early-b", "busy/b"}} {
		sub := connect5(t, s.Addr, c[0], false, 3600)
		sub.sub(c[1], 1)
		sub.close()
	}
	pub := connect3(t, s.Addr, "many-pub", false)
	pub.pubBurst(1, sizedFrom(0, 0, 10, 3)...) // a0..a9, b0..b29
	retainOnce(t, s)
	late := connect5(t, s.Addr, "late-a", false, 3600)
	late.sub("quiet/a", 1)
	late.close()
	pub.pubBurst(1, sizedFrom(10, 30, 10, 3)...) // a10..a19, b30..b59
	retainOnce(t, s)
	pub.pubBurst(1, sizedFrom(20, 60, 5, 0)...) // a20..a24
	retainOnce(t, s)
	// 2,000 bytes hold twenty: early-b loses 10 in the first pass and 30
	// in the second; early-a 5 in the third; late-a none.
	st := s.Broker().Stats()
	if d, h := st.Dropped["retention"], st.LimitHits["queued_bytes"]; d != 45 || h != 45 {
		t.Fatalf("dropped by retention %d, queued_bytes hits %d; want 45 and 45", d, h)
	}
	sized := func(topic string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, topic+"="+payloadOf(i, 100))
		}
		return out
	}
	for _, c := range []struct {
		id   string
		want []string
	}{
		{"early-a", sized("quiet/a", 5, 25)},
		{"late-a", sized("quiet/a", 10, 25)},
		{"early-b", sized("busy/b", 40, 60)},
	} {
		sub := connect5(t, s.Addr, c.id, false, 3600)
		if got := topics5(sub.expect(len(c.want))); !slices.Equal(got, c.want) {
			t.Fatalf("%s received %v, want %v", c.id, got, c.want)
		}
		sub.expectNone(100 * time.Millisecond)
	}
}
