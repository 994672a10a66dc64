package mqtt_test

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/mqtttest"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
)

// doneTable is the broker's table of outbound QoS 2 completion marks
// (client id, NUL, cursor).
const doneTable = "mqtt.q2done"

// addDoneMarks writes n completion marks for client at log positions
// 1..n, far below any checkpoint, in commits the engine takes.
func addDoneMarks(t *testing.T, db *table.DB, client string, n int) {
	t.Helper()
	// Two engine entries a mark, and room for the commit's own writes.
	const per = engine.MaxBatchEntries / 4
	for lo := 1; lo <= n; lo += per {
		tx := db.Begin()
		for i := lo; i < lo+per && i <= n; i++ {
			tx.PutState(doneTable, client+"\x00"+strconv.Itoa(i), nil)
		}
		if err := tx.Commit(ctxT(t)); err != nil {
			t.Fatalf("add marks: %v", err)
		}
	}
}

// holdRows marks client's stored session as one that may hold rows, as
// the connection that writes them leaves it: rows written behind the
// broker's back while the session is offline are otherwise not looked for
// (see session.Record.Rowless).
func holdRows(t *testing.T, db *table.DB, client string) {
	t.Helper()
	r, err := db.Get(ctxT(t), session.Table, client)
	if err != nil {
		t.Fatal(err)
	}
	var rec session.Record
	if err := session.Decode(r.Value, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Loaded()
	rec.Rowless = false
	tx := db.Begin()
	if err := tx.ExpectVersion(session.Table, client, r.Version); err != nil {
		t.Fatal(err)
	}
	if err := session.Put(tx, client, &rec); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func countDoneMarks(t *testing.T, s *mqtttest.Server, client string) int {
	t.Helper()
	n := 0
	err := s.DB().Range(ctxT(t), doneTable, client+"\x00", func(r table.Record) bool {
		if !r.Deleted {
			n++
		}
		return true
	})
	if err != nil {
		t.Fatalf("range marks: %v", err)
	}
	return n
}

// TestSessionStateOverOneCommit gives a session more completion marks than
// one engine commit takes: the online session sheds them over several
// checkpoints, and a clean start discards them all instead of refusing
// the client.
func TestSessionStateOverOneCommit(t *testing.T) {
	const marks = engine.MaxBatchEntries + 3000
	s := startBroker(t, func(o *mqtt.Options) { o.CheckpointEvery = 20 * time.Millisecond })
	c := connect5(t, s.Addr, "big", false, 3600)
	c.sub("big/#", 2)
	c.close()
	waitFor(t, "big offline", func() bool { return !storedSession(t, s.DB(), "big").Online })

	holdRows(t, s.DB(), "big")
	addDoneMarks(t, s.DB(), "big", marks)
	c = connect5(t, s.Addr, "big", false, 3600)
	c.pub("big/1", 2, false, "one")
	c.expectOne("big/1", "one")
	deadline := time.Now().Add(wait)
	for countDoneMarks(t, s, "big") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d completion marks below the checkpoint left after %v", countDoneMarks(t, s, "big"), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.close()

	addDoneMarks(t, s.DB(), "big", marks)
	c = connect5(t, s.Addr, "big", true, 0)
	if n := countDoneMarks(t, s, "big"); n != 0 {
		t.Fatalf("clean start left %d completion marks", n)
	}
	c.pub("big/2", 1, false, "two")
	c.close()
}

// TestGroupedStagingWithATakenSlot: new QoS 2 PUBLISHes that arrive
// together are staged in one commit; when one of them finds its slot taken
// (here by another writer of the store after the connection began: first
// write wins), the others are staged all the same, every PUBLISH gets its
// PUBREC in order, and each release delivers exactly one message: the
// staged one for the taken slot.
func TestGroupedStagingWithATakenSlot(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "gs-sub", true, 0)
	sub.sub("gs/#", 2)

	cp := connect5Packet("gs-pub", false, 3600)
	r, _ := connectRaw(t, s.Addr, cp)
	first, err := (&mqtt.Message{Topic: "gs/t", Payload: []byte("first"), QoS: 2, From: "gs-pub"}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tx := s.DB().Begin()
	tx.PutState("mqtt.qos2in", "gs-pub\x0000005", first)
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// A first transmission on id 5, in one write with nine others.
	var burst bytes.Buffer
	w := packet.NewWriter(&burst, packet.V5)
	for pi := uint16(1); pi <= 10; pi++ {
		if err := w.WritePacket(&packet.Publish{QoS: packet.QoS2, PacketID: pi, Topic: "gs/t", Payload: []byte(fmt.Sprintf("m%d", pi))}); err != nil {
			t.Fatal(err)
		}
	}
	r.SendBytes(burst.Bytes())
	for pi := uint16(1); pi <= 10; pi++ {
		if rec, ok := r.Read("packet").(*packet.Pubrec); !ok || rec.PacketID != pi || rec.ReasonCode != 0 {
			t.Fatalf("PUBREC %d: got %+v", pi, rec)
		}
	}
	for pi := uint16(1); pi <= 10; pi++ {
		r.Send(&packet.Pubrel{PacketID: pi})
	}
	for pi := uint16(1); pi <= 10; pi++ {
		if comp, ok := r.Read("packet").(*packet.Pubcomp); !ok || comp.PacketID != pi || comp.ReasonCode != 0 {
			t.Fatalf("PUBCOMP %d: got %+v", pi, comp)
		}
	}
	got := map[string]int{}
	for _, m := range sub.expect(10) {
		got[string(m.Payload)]++
	}
	for pi := 1; pi <= 10; pi++ {
		want := fmt.Sprintf("m%d", pi)
		if pi == 5 {
			want = "first"
		}
		if got[want] != 1 {
			t.Fatalf("delivered %v, want %q once", got, want)
		}
	}
	sub.expectNone(300 * time.Millisecond)
}

// TestGroupedReleaseWithAReleasedCopy: the PUBRELs of a burst share one
// commit; when one copy was released elsewhere first (its slot emptied, as
// another node's release leaves it), nothing of the group applies, and
// the others are still released once each, in order.
func TestGroupedReleaseWithAReleasedCopy(t *testing.T) {
	s := startBroker(t)
	sub := connect5(t, s.Addr, "gr-sub", true, 0)
	sub.sub("gr/#", 2)

	r, _ := connectRaw(t, s.Addr, connect5Packet("gr-pub", false, 3600))
	for pi := uint16(1); pi <= 10; pi++ {
		r.Send(&packet.Publish{QoS: packet.QoS2, PacketID: pi, Topic: "gr/t", Payload: []byte(fmt.Sprintf("m%d", pi))})
		if rec, ok := r.Read("packet").(*packet.Pubrec); !ok || rec.PacketID != pi || rec.ReasonCode != 0 {
			t.Fatalf("PUBREC %d: got %+v", pi, rec)
		}
	}
	tx := s.DB().Begin()
	tx.DeleteStateUnchecked("mqtt.qos2in", "gr-pub\x0000005")
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	var burst bytes.Buffer
	w := packet.NewWriter(&burst, packet.V5)
	for pi := uint16(1); pi <= 10; pi++ {
		if err := w.WritePacket(&packet.Pubrel{PacketID: pi}); err != nil {
			t.Fatal(err)
		}
	}
	r.SendBytes(burst.Bytes())
	for pi := uint16(1); pi <= 10; pi++ {
		if comp, ok := r.Read("packet").(*packet.Pubcomp); !ok || comp.PacketID != pi || comp.ReasonCode != 0 {
			t.Fatalf("PUBCOMP %d: got %+v", pi, comp)
		}
	}
	var got []string
	for _, m := range sub.expect(9) {
		got = append(got, string(m.Payload))
	}
	if want := "[m1 m2 m3 m4 m6 m7 m8 m9 m10]"; fmt.Sprint(got) != want {
		t.Fatalf("delivered %v, want %s", got, want)
	}
	sub.expectNone(300 * time.Millisecond)
}

// TestEndedExchangesLeaveNoState: the end of an outbound QoS 2 exchange is
// stored with a later commit, not one of its own; once traffic stops, the
// next checkpoints still remove every in-flight record and completion
// mark of an online session that received everything.
func TestEndedExchangesLeaveNoState(t *testing.T) {
	s := startBroker(t, func(o *mqtt.Options) { o.CheckpointEvery = 20 * time.Millisecond })
	sub := connect5(t, s.Addr, "ends", false, 3600)
	sub.sub("ends/#", 2)
	pub := connect5(t, s.Addr, "ends-pub", true, 0)
	const n = 20
	for i := range n {
		pub.pub("ends/x", 2, false, strconv.Itoa(i))
	}
	sub.expect(n)
	count := func(tbl string) int {
		k := 0
		if err := s.DB().Range(ctxT(t), tbl, "ends\x00", func(r table.Record) bool {
			if !r.Deleted {
				k++
			}
			return true
		}); err != nil {
			t.Fatalf("range %s: %v", tbl, err)
		}
		return k
	}
	deadline := time.Now().Add(wait)
	for count("mqtt.out")+count(doneTable) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d in-flight records and %d completion marks left after %v", count("mqtt.out"), count(doneTable), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCompletionMarksKeepUpWithDeliveries: a subscriber that completes
// more QoS 2 deliveries between two checkpoints than one commit drops
// marks for keeps none below the next checkpoint. Shedding one commit's
// worth per checkpoint instead, marks grew for as long as such a load
// lasted: three checkpoints could not have dropped them all.
func TestCompletionMarksKeepUpWithDeliveries(t *testing.T) {
	const perCommit = engine.MaxBatchEntries / 4 // the broker's limit of deletes per commit
	const n = 3*perCommit + 500
	s := startBroker(t, func(o *mqtt.Options) { o.CheckpointEvery = time.Hour })
	sub, _ := connectRaw(t, s.Addr, connect5Packet("keep-sub", false, 3600))
	sub.Send(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: "keep/#", QoS: 2}}})
	if _, ok := sub.Read("packet").(*packet.Suback); !ok {
		t.Fatal("no SUBACK")
	}
	sub.Send(&packet.Disconnect{})
	sub.ExpectClose()

	// Published while the subscriber is away, so it takes them in one go.
	pub, _ := connectRaw(t, s.Addr, connect5Packet("keep-pub", true, 0))
	const burst = 100
	total := 0
	for ; total < n; total += burst {
		var b bytes.Buffer
		w := packet.NewWriter(&b, packet.V5)
		for pi := uint16(1); pi <= burst; pi++ {
			if err := w.WritePacket(&packet.Publish{QoS: packet.QoS2, PacketID: pi, Topic: "keep/t", Payload: []byte("m")}); err != nil {
				t.Fatal(err)
			}
		}
		pub.SendBytes(b.Bytes())
		for pi := uint16(1); pi <= burst; pi++ {
			if _, ok := pub.Read("packet").(*packet.Pubrec); !ok {
				t.Fatalf("PUBREC %d missing", pi)
			}
		}
		for pi := uint16(1); pi <= burst; pi++ {
			pub.Send(&packet.Pubrel{PacketID: pi})
		}
		for pi := uint16(1); pi <= burst; pi++ {
			if _, ok := pub.Read("packet").(*packet.Pubcomp); !ok {
				t.Fatalf("PUBCOMP %d missing", pi)
			}
		}
	}

	sub, _ = connectRaw(t, s.Addr, connect5Packet("keep-sub", false, 3600))
	for completed := 0; completed < total; {
		switch p := sub.Read("packet").(type) {
		case *packet.Publish:
			sub.Send(&packet.Pubrec{PacketID: p.PacketID})
		case *packet.Pubrel:
			sub.Send(&packet.Pubcomp{PacketID: p.PacketID})
			completed++
		default:
			t.Fatalf("unexpected %T", p)
		}
	}
	// Each disconnect persists the checkpoint. The last completions reach
	// it a moment after their PUBCOMPs, and the endings a disconnect's own
	// commit writes go with the next one: a few sessions may be needed.
	left := 0
	for round := 1; round <= 3; round++ {
		time.Sleep(100 * time.Millisecond)
		sub.Send(&packet.Disconnect{})
		sub.ExpectClose()
		if left = countDoneMarks(t, s, "keep-sub"); left == 0 {
			return
		}
		sub, _ = connectRaw(t, s.Addr, connect5Packet("keep-sub", false, 3600))
	}
	t.Fatalf("%d of %d completion marks left after three checkpoints", left, total)
}
