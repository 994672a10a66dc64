package mqtt_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/mqtt/topic"
	"github.com/tidemark-io/tidemark/table"
)

// cpEntry is the checkpoint index's id of client at cp, as the broker
// writes it.
func cpEntry(cp table.Cursor, client string) string {
	idx := uint32(math.MaxUint32)
	if cp.Next > 0 {
		idx = cp.Next - 1
	}
	return fmt.Sprintf("%016x%08x\x00%s", uint64(cp.Key), idx, client)
}

// ids lists the ids of table's live records, without the index marker.
func ids(t *testing.T, db *table.DB, tbl string) []string {
	t.Helper()
	var out []string
	if err := db.Range(ctxT(t), tbl, "", func(r table.Record) bool {
		if r.ID != "~indexed" {
			out = append(out, r.ID)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantCheckpointIndex lists one checkpoint entry per stored session, at
// its persisted checkpoint.
func wantCheckpointIndex(t *testing.T, db *table.DB) []string {
	t.Helper()
	ss, err := mqtt.Sessions(ctxT(t), db)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range ss {
		out = append(out, cpEntry(s.Checkpoint[0], s.ClientID))
	}
	slices.Sort(out)
	return out
}

// awaitCheckpointIndex waits until the checkpoint index holds exactly one
// entry per stored session, at its persisted checkpoint (a disconnect
// persists the session after the client is gone).
func awaitCheckpointIndex(t *testing.T, s *mqtttest.Server) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		want, got := wantCheckpointIndex(t, s.DB()), ids(t, s.DB(), "mqtt.checkpoints")
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint index\n got %q\nwant %q", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitGone waits until client's session is no longer stored (a clean
// session is discarded after the client is gone).
func awaitGone(t *testing.T, s *mqtttest.Server, client string) {
	t.Helper()
	for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
		if _, err := s.DB().Get(ctxT(t), "mqtt.sessions", client); errors.Is(err, table.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still stored after its clean session ended", client)
		}
	}
}

// The checkpoint index keeps one entry per stored session at its persisted
// checkpoint as sessions are made, catch up, move their checkpoint and are
// discarded, and the recovery index names only sessions online or holding
// a will.
func TestCheckpointIndexFollowsSessions(t *testing.T) {
	s := startBroker(t)
	for i := range 4 {
		c := connect3(t, s.Addr, fmt.Sprintf("cpi-%d", i), false)
		c.sub("cpi/#", 1)
		c.close()
	}
	pub := connect3(t, s.Addr, "cpi-pub", true)
	for i := range 10 {
		pub.pub("cpi/x", 1, false, fmt.Sprint(i))
	}
	awaitCheckpointIndex(t, s)
	for _, id := range []string{"cpi-1", "cpi-2"} {
		c := connect3(t, s.Addr, id, false)
		c.expect(10)
		c.close()
	}
	on := connect3(t, s.Addr, "cpi-on", false)
	on.sub("cpi/#", 1)
	connect3(t, s.Addr, "cpi-3", true).close() // clean session: discards cpi-3
	awaitGone(t, s, "cpi-3")
	awaitCheckpointIndex(t, s)
	ss, err := mqtt.Sessions(ctxT(t), s.DB())
	if err != nil {
		t.Fatal(err)
	}
	cps := map[string]table.Cursor{}
	for _, si := range ss {
		cps[si.ClientID] = si.Checkpoint[0]
	}
	if !cps["cpi-0"].Less(cps["cpi-1"]) {
		t.Fatalf("the checkpoint of a session that caught up (%v) is not above one that did not (%v)", cps["cpi-1"], cps["cpi-0"])
	}
	if got := ids(t, s.DB(), "mqtt.recover"); !slices.Equal(got, []string{"cpi-on", "cpi-pub"}) {
		t.Fatalf("recovery index %q, want only the online cpi-on and cpi-pub", got)
	}
}

// Retention bounds itself by a session's record, not a stale index entry:
// an entry below the session's checkpoint, or of a session that is gone,
// neither holds the log back nor survives the pass, and the session's own
// entry is written back.
func TestRetainRepairsStaleCheckpointEntries(t *testing.T) {
	s := startBroker(t)
	sub := connect3(t, s.Addr, "stale-sub", false)
	sub.sub("stale/#", 1)
	pub := connect3(t, s.Addr, "stale-pub", true)
	for i := range 10 {
		pub.pub("stale/x", 1, false, fmt.Sprint(i))
	}
	sub.expect(10)
	sub.close()
	pub.close()
	awaitGone(t, s, "stale-pub")
	awaitCheckpointIndex(t, s)
	want := wantCheckpointIndex(t, s.DB())
	tx := s.DB().Begin()
	for _, id := range want {
		_ = tx.DeleteStateUnchecked("mqtt.checkpoints", id)
	}
	_ = tx.PutStateUnchecked("mqtt.checkpoints", cpEntry(table.Cursor{Key: 1}, "stale-sub"), nil)
	_ = tx.PutStateUnchecked("mqtt.checkpoints", cpEntry(table.Cursor{Key: 1}, "stale-gone"), nil)
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Broker().Retain(ctxT(t)); err != nil {
		t.Fatalf("retain: %v", err)
	}
	st, err := s.DB().LogStats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Floor == 0 {
		t.Fatalf("stale entries below every checkpoint held the log back: %+v", st)
	}
	if got := ids(t, s.DB(), "mqtt.checkpoints"); !slices.Equal(got, want) {
		t.Fatalf("checkpoint index after the pass\n got %q\nwant %q", got, want)
	}
	// The session still resumes where it was: nothing it had not
	// acknowledged went with the truncation.
	pub = connect3(t, s.Addr, "stale-pub", true)
	pub.pub("stale/x", 1, false, "after")
	sub = connect3(t, s.Addr, "stale-sub", false)
	sub.expectResumed("stale/x", "after")
}

// A store written before the indexes existed gets them at the next start,
// once: retention then still keeps what an offline session needs, and a
// delayed will left in a session record is still published.
func TestSessionIndexesBuiltOnUpgrade(t *testing.T) {
	s := startBroker(t)
	watch := connect5(t, s.Addr, "up-watch", false, 3600)
	watch.sub("up/will", 1)
	watch.close()
	off := connect3(t, s.Addr, "up-off", false)
	off.sub("up/#", 1)
	off.close()
	cp := &paho.Connect{ClientID: "up-will", KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: u32(3600)},
		WillMessage: &paho.WillMessage{Topic: "up/will", Payload: []byte("will"), QoS: 1}, WillProperties: &paho.WillProperties{WillDelayInterval: u32(4)}}
	if _, err := dial5(t, s.Addr, cp, nil); err != nil {
		t.Fatal(err)
	}
	pub := connect3(t, s.Addr, "up-pub", true)
	for i := range 5 {
		pub.pub("up/x", 1, false, fmt.Sprint(i))
	}
	pub.close()
	if err := s.Stop(); err != nil { // the will waits for its delay in up-will's record
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	awaitCheckpointIndex(t, s)
	want := wantCheckpointIndex(t, s.DB())
	// Make it the store of an older broker: no index, no marker.
	tx := s.DB().Begin()
	for _, tbl := range []string{"mqtt.checkpoints", "mqtt.recover"} {
		for _, id := range append(ids(t, s.DB(), tbl), "~indexed") {
			_ = tx.DeleteStateUnchecked(tbl, id)
		}
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, s.DB(), "mqtt.checkpoints"); !slices.Equal(got, want) {
		t.Fatalf("checkpoint index built on upgrade\n got %q\nwant %q", got, want)
	}
	if _, err := s.DB().Get(ctxT(t), "mqtt.checkpoints", "~indexed"); err != nil {
		t.Fatalf("no marker after the build: %v", err)
	}
	if err := s.Broker().Retain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	off = connect3(t, s.Addr, "up-off", false)
	off.expect(5)
	watch = connect5(t, s.Addr, "up-watch", false, 3600)
	watch.expectOne("up/will", "will")
}

// AddOfflineSessions stores what a client that connected with clean start
// false, subscribed and went away leaves: such a session resumes with its
// subscriptions, receives what was published after it was stored, and
// refuses a client id already stored.
func TestAddOfflineSessions(t *testing.T) {
	s := startBroker(t)
	real := connect3(t, s.Addr, "prov-real", false)
	real.sub("prov/real", 1)
	real.close()
	subs := []topic.Subscription{{Filter: "prov/a", QoS: 1}, {Filter: "prov/+/b", QoS: 2}}
	var batch []mqtt.OfflineSession
	// The expiry a real 3.1.1 persistent session gets by default.
	expiry := uint32(mqtt.DefaultSessionExpiry / time.Second)
	for i := range 1500 { // more than one commit
		batch = append(batch, mqtt.OfflineSession{ClientID: fmt.Sprintf("prov-%04d", i), Version: packet.V311, ExpirySeconds: expiry, Subscriptions: subs})
	}
	if err := mqtt.AddOfflineSessions(ctxT(t), s.DB(), batch); err != nil {
		t.Fatal(err)
	}
	awaitCheckpointIndex(t, s)
	ss, err := mqtt.Sessions(ctxT(t), s.DB())
	if err != nil {
		t.Fatal(err)
	}
	var realInfo, provInfo mqtt.SessionInfo
	for _, si := range ss {
		switch si.ClientID {
		case "prov-real":
			realInfo = si
		case "prov-0777":
			provInfo = si
		}
	}
	if realInfo.Online || provInfo.Online || realInfo.Protocol != provInfo.Protocol || realInfo.ExpirySeconds != provInfo.ExpirySeconds ||
		realInfo.HasWill != provInfo.HasWill || provInfo.DisconnectedAt.IsZero() {
		t.Fatalf("stored session differs from a real one:\nreal %+v\nprov %+v", realInfo, provInfo)
	}
	if got := provInfo.Subscriptions; !slices.Equal(got, []string{"prov/a qos1", "prov/+/b qos2"}) {
		t.Fatalf("subscriptions %q", got)
	}
	pub := connect3(t, s.Addr, "prov-pub", true)
	pub.pub("prov/x/b", 1, false, "queued")
	c := connect3(t, s.Addr, "prov-0777", false)
	c.expectOne("prov/x/b", "queued")
	err = mqtt.AddOfflineSessions(ctxT(t), s.DB(), []mqtt.OfflineSession{{ClientID: "prov-real", Version: packet.V311, ExpirySeconds: 60}})
	if !errors.Is(err, mqtt.ErrSessionExists) {
		t.Fatalf("a stored client id was not refused: %v", err)
	}
	err = mqtt.AddOfflineSessions(ctxT(t), s.DB(), []mqtt.OfflineSession{{ClientID: "prov-zero", Version: packet.V311}})
	if err == nil {
		t.Fatal("a session expiry of 0 was accepted")
	}
}

// storedSession returns client's stored session, failing when there is none.
func storedSession(t *testing.T, db *table.DB, client string) mqtt.SessionInfo {
	t.Helper()
	ss, err := mqtt.Sessions(ctxT(t), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.ClientID == client {
			return s
		}
	}
	t.Fatalf("session %q not stored", client)
	return mqtt.SessionInfo{}
}

// On a store of its own, an online session's timed checkpoint writes
// leave its checkpoint index entry where it was: retention takes the
// session's checkpoint from memory, and still cuts the log below it. Its
// disconnect writes the entry at its checkpoint. On a store other nodes
// share, whose passes cannot read that memory, every write moves it.
func TestCheckpointIndexLazyWhileOnline(t *testing.T) {
	for _, node := range []string{"", "A"} {
		t.Run("node="+node, func(t *testing.T) {
			s := startBroker(t, func(o *mqtt.Options) {
				o.NodeID, o.CheckpointEvery, o.RetentionEvery = node, 20*time.Millisecond, time.Hour
			})
			c := connect3(t, s.Addr, "lz", false)
			c.sub("lz/#", 1)
			awaitCheckpointIndex(t, s)
			before := ids(t, s.DB(), "mqtt.checkpoints")
			for i := range 5 {
				if err := s.Broker().Publish(ctxT(t), mqtt.Message{Topic: "lz/x", Payload: []byte(fmt.Sprint(i)), QoS: 1}); err != nil {
					t.Fatal(err)
				}
			}
			c.expect(5)
			st, err := s.DB().LogStats(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the checkpoint past the messages written", func() bool {
				return st.Last <= storedSession(t, s.DB(), "lz").Checkpoint[0].Key
			})
			if node == "" {
				if got := ids(t, s.DB(), "mqtt.checkpoints"); !slices.Equal(got, before) {
					t.Fatalf("an online session's checkpoint write moved its entry: %q, was %q", got, before)
				}
				retainOnce(t, s)
				cut, err := s.DB().LogStats(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				if cut.First != 0 && cut.First < st.Last {
					t.Fatalf("the log starts at %d after a pass: the stale entry of an online session held back what it acknowledged, up to %d", cut.First, st.Last)
				}
			} else {
				awaitCheckpointIndex(t, s)
			}
			c.close()
			awaitCheckpointIndex(t, s)
			if got := ids(t, s.DB(), "mqtt.checkpoints"); slices.Equal(got, before) {
				t.Fatalf("the entry stayed at %q after the disconnect", got)
			}
		})
	}
}

// A checkpoint the sender built before a SUBSCRIBE's write of the session
// record commits before it, never after: committed after, it would put
// back the record as it was, without the new subscription, which a
// restart then loses although its SUBACK went out.
func TestCheckpointDoesNotOvertakeSubscribe(t *testing.T) {
	s, c, release := heldCheckpoint(t, "ck", 3600)
	subbed := make(chan struct{})
	go func() {
		defer close(subbed)
		c.sub("ck/b", 1)
	}()
	select {
	case <-subbed: // a SUBSCRIBE that need not wait for the checkpoint
	case <-time.After(300 * time.Millisecond):
	}
	release()
	<-subbed
	// The held checkpoint goes to the store as soon as it is released;
	// whatever order the two writes took shows within this time.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if got := storedSession(t, s.DB(), "ck").Subscriptions; !slices.Contains(got, "ck/b qos1") {
			t.Fatalf("stored subscriptions %q after the SUBACK of ck/b: a checkpoint built before it committed after it", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	restart(t, s)
	c = connect5(t, s.Addr, "ck", false, 3600)
	pub := connect5(t, s.Addr, "ck-pub", true, 0)
	pub.pub("ck/b", 1, false, "two")
	c.expectOne("ck/b", "two")
}

// A timed checkpoint runs on a store goroutine, not on the session's
// sender, so ending the connection does not wait for it by stopping the
// sender. One being written as the connection ends must still commit
// before the session is discarded: committed after, it would bring back
// the record of a session that ended with its connection. Two things
// keep it from that: the session's Stop waits for it and stops the ones
// still queued, and its submit carries the connection's context, which
// the end cancels (each alone passes this test; neither fails it).
func TestCheckpointDoesNotOutliveDiscard(t *testing.T) {
	s, c, release := heldCheckpoint(t, "gone", 0)
	c.close() // session expiry 0: the session ends with the connection
	time.Sleep(200 * time.Millisecond)
	release()
	stored := func() bool {
		ss, err := mqtt.Sessions(ctxT(t), s.DB())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ss, func(si mqtt.SessionInfo) bool { return si.ClientID == "gone" })
	}
	// The held checkpoint commits, then the connection's end discards the
	// session, for good.
	deadline := time.Now().Add(wait)
	for stored() {
		if time.Now().After(deadline) {
			t.Fatal("the session of a connection that ended with session expiry 0 is still stored: a checkpoint committed after its discard")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 25 {
		time.Sleep(20 * time.Millisecond)
		if stored() {
			t.Fatal("the session of a connection that ended with session expiry 0 was stored again after its discard")
		}
	}
}

// heldCheckpoint starts a broker whose first checkpoint write of client
// waits, built and about to be submitted, until release (which the test's
// end calls too), and returns once client, connected with session expiry
// expiry and subscribed to client/a, received a message there and its
// checkpoint waits.
func heldCheckpoint(t *testing.T, client string, expiry uint32) (*mqtttest.Server, *client5, func()) {
	t.Helper()
	if !mqtt.HooksEnabled {
		t.Skip("needs a build with tag faults")
	}
	reached, gate := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	s := startBroker(t, func(o *mqtt.Options) {
		o.CheckpointEvery = 10 * time.Millisecond
		o.Hooks.Submit = func(k mqtt.Kind, c string) {
			if k == mqtt.KindCheckpoint && c == client && held.CompareAndSwap(false, true) {
				close(reached)
				<-gate
			}
		}
	})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	c := connect5(t, s.Addr, client, false, expiry)
	c.sub(client+"/a", 1)
	pub := connect5(t, s.Addr, client+"-pub", true, 0)
	pub.pub(client+"/a", 1, false, "one")
	c.expectOne(client+"/a", "one")
	select {
	case <-reached:
	case <-time.After(wait):
		t.Fatal("no checkpoint write after a completed delivery")
	}
	return s, c, release
}
