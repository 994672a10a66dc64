package session_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
	"github.com/tidemark-io/tidemark/table/tabletest"
	"pgregory.net/rapid"
)

// TestCheckpointIDs checks that checkpoint index ids sort as their
// partitions and then their cursors do, parse back to cursor and client
// in their own partition only, and that the marker is no entry and sorts
// after every one.
func TestCheckpointIDs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b := drawPos(t, "a", logpos.Max), drawPos(t, "b", logpos.Max)
		client := rapid.StringMatching(`[a-z0-9/-]{1,12}`).Draw(t, "client")
		ia, ib := session.CheckpointID(int(a.Part), a.C, client), session.CheckpointID(int(b.Part), b.C, client)
		if (ia < ib) != a.Less(b) || (ia == ib) != (a == b) {
			t.Fatalf("ids %q, %q sort unlike positions %v, %v", ia, ib, a, b)
		}
		cp, c, ok := session.ParseCheckpointID(int(a.Part), ia)
		if !ok || cp != a.C || c != client {
			t.Fatalf("%q parsed as %v %q %v, want %v %q", ia, cp, c, ok, a, client)
		}
		if a.Part != b.Part {
			if _, _, ok := session.ParseCheckpointID(int(b.Part), ia); ok {
				t.Fatalf("%q parsed in partition %d", ia, b.Part)
			}
		}
		if ia >= session.CheckpointsIndexed {
			t.Fatalf("id %q sorts after the marker", ia)
		}
	})
	for p := range logpos.Max {
		if _, _, ok := session.ParseCheckpointID(p, session.CheckpointsIndexed); ok {
			t.Fatal("the marker parsed as an entry")
		}
	}
}

// TestExpiryIDs checks that an expiry pass reading up to ExpiryDue(now)
// reads exactly the entries due at now, never the marker, and finds each
// entry's client.
func TestExpiryIDs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		deadline := rapid.Int64Min(0).Draw(t, "deadline")
		now := rapid.Int64Min(0).Draw(t, "now")
		client := rapid.StringMatching(`[a-z0-9/-]{1,12}`).Draw(t, "client")
		id, due := session.ExpiryID(deadline, client), session.ExpiryDue(now)
		if (id <= due) != (deadline <= now) {
			t.Fatalf("entry %q at %d against bound %q at %d", id, deadline, due, now)
		}
		if session.ExpiryIndexed <= due {
			t.Fatalf("the marker sorts below the bound %q", due)
		}
		if got := session.ExpiryClient(id); got != client {
			t.Fatalf("client of %q is %q, want %q", id, got, client)
		}
	})
}

// ids lists the ids of tbl's live records.
func ids(t *testing.T, db *table.DB, tbl string) []string {
	t.Helper()
	var out []string
	if err := db.Range(context.Background(), tbl, "", func(r table.Record) bool {
		if !r.Deleted {
			out = append(out, r.ID)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func commit(t *testing.T, tx *table.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// load reads client's record back as the broker does before writing it
// again.
func load(t *testing.T, db *table.DB, client string) session.Record {
	t.Helper()
	r, err := db.Get(context.Background(), session.Table, client)
	if err != nil {
		t.Fatal(err)
	}
	var s session.Record
	if err := session.Decode(r.Value, &s); err != nil {
		t.Fatal(err)
	}
	s.Loaded()
	return s
}

// TestPutKeepsIndexes checks the indexes' invariants on a real store
// through a session's life: one checkpoint entry at the persisted
// checkpoint, a recovery entry exactly while the record is online or
// holds a will, an expiry entry at the deadline of an offline session,
// and no checkpoint or recovery entry left once the record is deleted.
func TestPutKeepsIndexes(t *testing.T) {
	db := tabletest.Open(t)
	const client = "sensor-7"
	check := func(step string, cps, recover, expiry []string) {
		t.Helper()
		for tbl, want := range map[string][]string{session.CheckpointTable: cps, session.RecoverTable: recover, session.ExpiryTable: expiry} {
			if got := ids(t, db, tbl); !slices.Equal(got, want) {
				t.Fatalf("%s: %s holds %q, want %q", step, tbl, got, want)
			}
		}
	}

	// Connected, with a will.
	cp1 := table.Cursor{Key: 100, Next: 2}
	s := session.Record{Version: packet.V5, Expiry: 60, Online: true, Node: "n1", Conn: "c1", Checkpoint: logpos.One(cp1), SentHigh: logpos.One(cp1),
		Will: &session.Will{Msg: []byte("gone"), Delay: 5}}
	tx := db.Begin()
	if err := session.Put(tx, client, &s); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	check("online", []string{session.CheckpointID(0, cp1, client)}, []string{client}, nil)

	// Gone offline after its will was published, the checkpoint moved on.
	s = load(t, db, client)
	cp2 := table.Cursor{Key: 140}
	disc := time.UnixMilli(1767225600000)
	s.Online, s.Will, s.Checkpoint, s.DisconnectedAt = false, nil, logpos.One(cp2), disc.UnixMilli()
	tx = db.Begin()
	if err := session.Put(tx, client, &s); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	deadline, ok := s.Deadline()
	if !ok || deadline != disc.Add(60*time.Second).UnixMilli() {
		t.Fatalf("deadline %d, %v", deadline, ok)
	}
	if s.Expired(disc.Add(59*time.Second)) || !s.Expired(disc.Add(60*time.Second)) {
		t.Fatal("expiry judged away from the deadline")
	}
	check("offline", []string{session.CheckpointID(0, cp2, client)}, nil, []string{session.ExpiryID(deadline, client)})

	// Deleted: the checkpoint and recovery entries go in the same commit;
	// the expiry entry stays for the expirer, which finds no record.
	s = load(t, db, client)
	tx = db.Begin()
	if err := tx.DeleteState(session.Table, client); err != nil {
		t.Fatal(err)
	}
	session.Unindex(tx, client, &s)
	commit(t, tx)
	check("deleted", nil, nil, []string{session.ExpiryID(deadline, client)})

	// A record of a store written before the indexes existed, indexed
	// once from its decoded form.
	old := session.Record{Version: packet.V311, Expiry: session.NeverExpires, Online: true, Checkpoint: logpos.One(cp1)}
	tx = db.Begin()
	if err := tx.PutState(session.Table, client, session.Encode(&old)); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	r, err := db.Get(context.Background(), session.Table, client)
	if err != nil {
		t.Fatal(err)
	}
	var fresh session.Record
	if err := session.Decode(r.Value, &fresh); err != nil {
		t.Fatal(err)
	}
	tx = db.Begin()
	if err := session.Index(tx, client, &fresh); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
	check("indexed on upgrade", []string{session.CheckpointID(0, cp1, client)}, []string{client}, []string{session.ExpiryID(deadline, client)})
}

// TestIndexLazily checks the lazy writes of an online session's record:
// within the period its checkpoint entry stays below a checkpoint that
// moved up and its recovery entry is not put again; a checkpoint that
// moved down, a period that has passed, a write that is not lazy and a
// record read from the store move the entry at once.
func TestIndexLazily(t *testing.T) {
	db := tabletest.Open(t)
	const client = "meter-3"
	put := func(step string, s *session.Record, lazy time.Duration, wantWrites int, wantCP logpos.Vec) {
		t.Helper()
		tx := db.Begin()
		if lazy > 0 {
			s.IndexLazily(lazy)
		}
		if err := session.Put(tx, client, s); err != nil {
			t.Fatal(err)
		}
		if w, _ := tx.Size(); w != wantWrites {
			t.Fatalf("%s: %d writes, want %d", step, w, wantWrites)
		}
		commit(t, tx)
		if got, want := ids(t, db, session.CheckpointTable), []string{session.CheckpointID(0, wantCP.Of(0), client)}; !slices.Equal(got, want) {
			t.Fatalf("%s: checkpoint index %q, want %q", step, got, want)
		}
		if got := ids(t, db, session.RecoverTable); !slices.Equal(got, []string{client}) {
			t.Fatalf("%s: recovery index %q", step, got)
		}
	}
	cp := func(k int) logpos.Vec { return logpos.One(table.Cursor{Key: engine.LogKey(k)}) }
	s := session.Record{Version: packet.V311, Expiry: session.NeverExpires, Online: true, Checkpoint: cp(100)}
	put("connect", &s, 0, 3, cp(100)) // record, checkpoint and recovery entries

	s.Checkpoint = cp(110)
	put("lazy, moved up", &s, time.Hour, 1, cp(100)) // the record alone
	s.Checkpoint = cp(120)
	put("lazy again", &s, time.Hour, 1, cp(100))
	s.Checkpoint = cp(90)
	put("lazy, moved down", &s, time.Hour, 4, cp(90)) // old entry dropped, new put, recovery put
	s.Checkpoint = cp(130)
	put("not lazy", &s, 0, 4, cp(130))

	s.Checkpoint = cp(140)
	time.Sleep(2 * time.Millisecond)
	put("lazy, period passed", &s, time.Millisecond, 4, cp(140))

	r := load(t, db, client)
	r.Checkpoint = cp(150)
	put("lazy, read from the store", &r, time.Hour, 4, cp(150))
	r.Checkpoint = cp(160)
	put("lazy after that", &r, time.Hour, 1, cp(150))
}

// TestSlotIDFormat pins the stored form of per-exchange record ids: the
// staged and outbound records of sessions written by earlier versions
// must still be found.
func TestSlotIDFormat(t *testing.T) {
	for _, pi := range []uint16{0, 1, 9, 10, 999, 12345, 65535} {
		for _, client := range []string{"", "c", "client/with/slashes"} {
			want := fmt.Sprintf("%s\x00%05d", client, pi)
			if got := session.SlotID(client, pi); got != want {
				t.Errorf("SlotID(%q, %d) = %q, want %q", client, pi, got, want)
			}
		}
	}
}

// TestDoneIDFormat checks that completion mark ids are the client, Sep
// and the position's text form: in the first partition the cursor's, as
// stored marks have always been named.
func TestDoneIDFormat(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		client := rapid.String().Draw(t, "client")
		pos := drawPos(t, "pos", logpos.Max)
		want := client + session.Sep + pos.String()
		if got := session.DoneID(client, pos); got != want {
			t.Fatalf("DoneID(%q, %v) = %q, want %q", client, pos, got, want)
		}
		if pos.Part == 0 && want != client+session.Sep+pos.C.String() {
			t.Fatalf("first partition's mark %q is not named by its cursor", want)
		}
		back, err := logpos.ParsePos(want[len(client)+len(session.Sep):])
		if err != nil || back != pos {
			t.Fatalf("mark %q parsed as %v, %v", want, back, err)
		}
	})
}

// TestShareMembersIndex checks that the share-members index follows a
// session's shared subscriptions through its record's writes: an entry
// per share while the record holds it, none after an unsubscribe or the
// record's deletion, and that the ids parse back.
func TestShareMembersIndex(t *testing.T) {
	db := tabletest.Open(t)
	ctx := context.Background()
	entries := func() []string { return ids(t, db, session.SharesTable) }
	put := func(rec *session.Record) {
		t.Helper()
		tx := db.Begin()
		if err := session.Put(tx, "c1", rec); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rec := &session.Record{Expiry: 60, Subs: []session.Sub{
		{Filter: "a/#", Group: "g1"}, {Filter: "plain/+"}, {Filter: "b", Group: "g2"},
	}}
	put(rec)
	want := []string{session.ShareMemberID("g1", "a/#", "c1"), session.ShareMemberID("g2", "b", "c1")}
	if got := entries(); !slices.Equal(got, want) {
		t.Fatalf("entries %q, want %q", got, want)
	}
	put(rec) // a checkpoint write: nothing changes
	rec.Subs = rec.Subs[:2]
	put(rec)
	if got := entries(); !slices.Equal(got, want[:1]) {
		t.Fatalf("after unsubscribing from g2: %q, want %q", got, want[:1])
	}
	if g, f, c, ok := session.ParseShareMemberID(want[0]); !ok || g != "g1" || f != "a/#" || c != "c1" {
		t.Fatalf("%q parsed as %q %q %q %v", want[0], g, f, c, ok)
	}
	st := &session.Store{DB: db, MaxDeletes: func() int { return 100 }}
	if err := st.Discard(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if got := entries(); len(got) != 0 {
		t.Fatalf("after the discard: %q, want none", got)
	}
}
