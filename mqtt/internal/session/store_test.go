package session_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/mqtt/internal/logpos"
	"github.com/tidemark-io/tidemark/mqtt/internal/session"
	"github.com/tidemark-io/tidemark/mqtt/packet"
	"github.com/tidemark-io/tidemark/table"
	"github.com/tidemark-io/tidemark/table/tabletest"
)

// newStore returns a Store over db with a small deletion chunk (so a
// discard of a few rows takes several commits) and online telling which
// clients are online here, at which live checkpoint.
func newStore(db *table.DB, online map[string]logpos.Vec) *session.Store {
	return &session.Store{
		DB: db, Log: slog.New(slog.DiscardHandler), MaxDeletes: func() int { return 2 },
		Online: func(client string, part int, persisted table.Cursor) (table.Cursor, bool) {
			cp, ok := online[client]
			if !ok {
				return persisted, false
			}
			return cp.Of(part), true
		},
	}
}

func putRecord(t *testing.T, db *table.DB, client string, s *session.Record) {
	t.Helper()
	tx := db.Begin()
	if err := session.Put(tx, client, s); err != nil {
		t.Fatal(err)
	}
	commit(t, tx)
}

// TestStoreDiscard: a discard deletes the record, its index entries and
// every row of the client in the exchange tables, in chunks, and nothing
// of another client whose id shares a prefix; a discard conditional on a
// stale version deletes nothing.
func TestStoreDiscard(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	st := newStore(db, nil)
	for _, c := range []string{"dev", "dev2"} {
		putRecord(t, db, c, &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Checkpoint: logpos.One(table.Cursor{Key: 3})})
		tx := db.Begin()
		for pi := uint16(1); pi <= 3; pi++ {
			_ = tx.PutStateUnchecked(session.OutTable, session.SlotID(c, pi), []byte("o"))
			_ = tx.PutState(session.StagedTable, session.SlotID(c, pi), []byte("s"))
			_ = tx.PutStateUnchecked(session.DoneTable, c+session.Sep+table.Cursor{Key: engine.LogKey(10 + pi)}.String(), nil)
		}
		commit(t, tx)
	}
	rec, ver, ok, err := st.Load(ctx, "dev")
	if err != nil || !ok {
		t.Fatalf("load: %v, %v", ok, err)
	}
	rec.Checkpoint = logpos.One(table.Cursor{Key: 4})
	putRecord(t, db, "dev", &rec)
	if err := st.DiscardIfAt(ctx, "dev", ver); !errors.Is(err, engine.ErrConflict) {
		t.Fatalf("discard at a stale version: %v, want a conflict", err)
	}
	if _, _, ok, _ := st.Load(ctx, "dev"); !ok {
		t.Fatal("a discard at a stale version deleted the session")
	}
	if err := st.Discard(ctx, "dev"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, _ := st.Load(ctx, "dev"); ok {
		t.Fatal("session still there after the discard")
	}
	for _, tbl := range []string{session.OutTable, session.StagedTable, session.DoneTable, session.CheckpointTable} {
		for _, id := range ids(t, db, tbl) {
			if c := clientOf(id); c == "dev" {
				t.Errorf("%s still holds %q of the discarded session", tbl, id)
			}
		}
	}
	if n := len(ids(t, db, session.OutTable)); n != 3 {
		t.Errorf("the other client's outbound rows: %d, want 3", n)
	}
}

// clientOf returns the client id an exchange or checkpoint row id names.
func clientOf(id string) string {
	if _, c, ok := session.ParseCheckpointID(0, id); ok {
		return c
	}
	for i := range len(id) {
		if id[i] == session.Sep[0] {
			return id[:i]
		}
	}
	return id
}

// TestStoreExpiry: a session whose expiry passed is discarded when read
// and reported absent, and the expirer discards a due offline session
// but not one online here.
func TestStoreExpiry(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	disc := time.UnixMilli(1767225600000)
	for _, c := range []string{"gone", "back", "read"} {
		putRecord(t, db, c, &session.Record{Version: packet.V311, Expiry: 10, DisconnectedAt: disc.UnixMilli()})
	}
	st := newStore(db, map[string]logpos.Vec{"back": {}})
	if _, _, ok, err := st.LoadAt(ctx, "read", disc.Add(9*time.Second)); err != nil || !ok {
		t.Fatalf("read before its deadline: %v, %v", ok, err)
	}
	if _, _, ok, err := st.LoadAt(ctx, "read", disc.Add(10*time.Second)); err != nil || ok {
		t.Fatalf("read at its deadline: present %v, %v", ok, err)
	}
	// Two passes: one reads at most MaxDeletes entries.
	for range 2 {
		if err := st.ExpireDue(ctx, disc.Add(11*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Get(ctx, session.Table, "gone"); !errors.Is(err, table.ErrNotFound) {
		t.Errorf("a due offline session was not expired: %v", err)
	}
	if _, err := db.Get(ctx, session.Table, "back"); err != nil {
		t.Errorf("a session online here was expired: %v", err)
	}
	if got := ids(t, db, session.ExpiryTable); len(got) != 0 {
		t.Errorf("expiry entries left after the pass: %q", got)
	}
}

// TestStoreLowestCheckpoint: the lowest checkpoint is the lowest of the
// offline sessions' persisted checkpoints and the online ones' live
// checkpoints; an index entry its record no longer confirms is replaced
// by the record's own.
func TestStoreLowestCheckpoint(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	head := table.Cursor{Key: 100}
	putRecord(t, db, "off", &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Checkpoint: logpos.One(table.Cursor{Key: 40})})
	putRecord(t, db, "on", &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Online: true, Checkpoint: logpos.One(table.Cursor{Key: 20})})
	st := newStore(db, map[string]logpos.Vec{"on": logpos.One(table.Cursor{Key: 60})})
	low, ok, err := st.LowestCheckpoint(ctx, 0, head)
	if err != nil || !ok || low != (table.Cursor{Key: 40}) {
		t.Fatalf("lowest = %v, %v, %v; want 40 (the online session is at 60)", low, ok, err)
	}
	// A stale entry below: the record of "off" says 50 now (written
	// without its index, as by a commit whose in-memory copy was behind).
	tx := db.Begin()
	_ = tx.PutState(session.Table, "off", session.Encode(&session.Record{Version: packet.V5, Expiry: session.NeverExpires, Checkpoint: logpos.One(table.Cursor{Key: 50})}))
	commit(t, tx)
	if low, ok, err = st.LowestCheckpoint(ctx, 0, head); err != nil || !ok || low != (table.Cursor{Key: 50}) {
		t.Fatalf("lowest with a stale entry = %v, %v, %v; want 50", low, ok, err)
	}
	want := []string{session.CheckpointID(0, table.Cursor{Key: 20}, "on"), session.CheckpointID(0, table.Cursor{Key: 50}, "off")}
	if got := ids(t, db, session.CheckpointTable); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("checkpoint index %q, want %q", got, want)
	}
}

// TestStoreLowestCheckpointPerPartition: with the log split, each
// partition has its own lowest checkpoint, found from that partition's
// part of the index alone, and a record moved on in one partition
// leaves the others' entries as they were.
func TestStoreLowestCheckpointPerPartition(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	vec := func(keys ...int) logpos.Vec {
		v := logpos.Start(len(keys))
		for i, k := range keys {
			v.Set(i, table.Cursor{Key: engine.LogKey(k)})
		}
		return v
	}
	head := table.Cursor{Key: 100}
	putRecord(t, db, "a", &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Checkpoint: vec(40, 10, 70)})
	putRecord(t, db, "b", &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Checkpoint: vec(30, 50, 80)})
	putRecord(t, db, "on", &session.Record{Version: packet.V5, Expiry: session.NeverExpires, Online: true, Checkpoint: vec(5, 5, 5)})
	st := newStore(db, map[string]logpos.Vec{"on": vec(60, 60, 60)})
	lows := func() []table.Cursor {
		t.Helper()
		var out []table.Cursor
		for p := range 3 {
			low, ok, err := st.LowestCheckpoint(ctx, p, head)
			if err != nil || !ok {
				t.Fatalf("partition %d: %v, %v", p, ok, err)
			}
			out = append(out, low)
		}
		return out
	}
	if got, want := lows(), vec(30, 10, 60).Cursors(); !slices.Equal(got, want) {
		t.Fatalf("lowest per partition %v, want %v", got, want)
	}
	// "a" moves on in partition 1 only.
	rec, _, _, err := st.Load(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	rec.Checkpoint.Set(1, table.Cursor{Key: 90})
	putRecord(t, db, "a", &rec)
	if got, want := lows(), vec(30, 50, 60).Cursors(); !slices.Equal(got, want) {
		t.Fatalf("lowest per partition after a move in one %v, want %v", got, want)
	}
	if n := len(ids(t, db, session.CheckpointTable)); n != 9 {
		t.Fatalf("checkpoint index holds %d entries, want 3 sessions x 3 partitions", n)
	}
}

// TestIndexSharesOnce: a store whose session records predate the
// share-members index gets an entry per shared subscription, in commits
// of MaxDeletes, and the marker, once.
func TestIndexSharesOnce(t *testing.T) {
	ctx := context.Background()
	db := tabletest.Open(t)
	for _, c := range []string{"a", "b", "c"} {
		rec := session.Record{Version: packet.V5, Expiry: 60, Subs: []session.Sub{{Filter: "x/#", Group: "g"}, {Filter: "y"}, {Filter: "z", Group: "h"}}}
		tx := db.Begin()
		if err := tx.PutState(session.Table, c, session.Encode(&rec)); err != nil { // no index entries
			t.Fatal(err)
		}
		commit(t, tx)
	}
	st := newStore(db, nil)
	for range 2 {
		if err := st.IndexShares(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, sh := range [][2]string{{"g", "x/#"}, {"h", "z"}} {
		for _, c := range []string{"a", "b", "c"} {
			want = append(want, session.ShareMemberID(sh[0], sh[1], c))
		}
	}
	want = append(want, session.SharesIndexed)
	if got := ids(t, db, session.SharesTable); !slices.Equal(got, want) {
		t.Fatalf("share-members entries %q, want %q", got, want)
	}
}
