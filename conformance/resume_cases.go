package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/table"
)

// The resume suite: the table layer's storage, cursor and subscription cases
// C01..C27 of the semantics note (docs/semantics.md, section 4; C25 to C27,
// on partitions, are in resume_partitions.go), on every
// engine. Counts are scaled down from the note where it asks for minutes of
// load (each case says where), so the suite stays well under a minute per
// engine.
func init() {
	register("resume",
		Case{Name: "C01_key_granularity_probe", Run: caseKeyGranularityProbe},
		Case{Name: "C02_send_fails_after_two_deliveries", Run: caseSendFailsAfterTwoDeliveries},
		Case{Name: "C03_send_fails_inside_transaction", Run: caseSendFailsInsideTransaction},
		Case{Name: "C04_filter_rejects_last_record", Run: caseFilterRejectsLastRecord},
		Case{Name: "C05_close_at_yield_in_150_record_transaction", Run: caseCloseAtYieldIn150RecordTransaction},
		Case{Name: "C06_close_while_waiting_for_drain", Run: caseCloseWhileWaitingForDrain},
		Case{Name: "C07_foreign_entries_do_not_move_cursor", Run: caseForeignEntriesDoNotMoveCursor},
		Case{Name: "C08_superseded_handling", Run: caseSupersededHandling},
		Case{Name: "C09_replay_to_live_handoff_under_writes", Run: caseReplayToLiveHandoffUnderWrites},
		Case{Name: "C10_live_gate", Run: caseLiveGate},
		Case{Name: "C11_fresh_durable_subscription", Run: caseFreshDurableSubscription},
		Case{Name: "C12_single_record_history_send_fails", Run: caseSingleRecordHistorySendFails},
		Case{Name: "C13_queued_vs_consumed", Run: caseQueuedVsConsumed},
		Case{Name: "C14_partial_ack_in_shared_key_transaction", Run: casePartialAckInSharedKeyTransaction},
		Case{Name: "C15_out_of_order_ack_in_shared_key_transaction", Run: caseOutOfOrderAckInSharedKeyTransaction},
		Case{Name: "C16_kill_mid_replay", Run: caseKillMidReplay},
		Case{Name: "C17_clock_rollback_across_restart", Run: caseClockRollbackAcrossRestart},
		Case{Name: "C18_retention_below_cursor", Run: caseRetentionBelowCursor},
		Case{Name: "C19_bulk_load_marker_in_range", Run: caseBulkLoadMarkerInRange},
		Case{Name: "C20_property_random_transactions_and_stops", Run: casePropertyRandomTransactionsAndStops},
		Case{Name: "C21_property_writers_and_resuming_subscribers", Run: casePropertyWritersAndResumingSubscribers},
		Case{Name: "C22_deterministic_resume", Run: caseDeterministicResume},
		Case{Name: "C23_yield_cadence_and_fairness", Run: caseYieldCadenceAndFairness},
		Case{Name: "C24_point_reads_under_load", Run: casePointReadsUnderLoad},
	)
}

// durableOpts are the options of a durable consumer: every version, from
// a cursor.
func durableOpts(tbl string, start table.Cursor) table.SubscribeOptions {
	return table.SubscribeOptions{Table: tbl, Start: start, IncludeSuperseded: true}
}

func caseKeyGranularityProbe(t T, tg Target) {
	r := newRig(t, tg)
	start := r.head()
	t1 := r.txn("t", "1", "2", "3")
	t2 := r.txn("t", "4")
	k := func(w wrote) engine.LogKey { return w.at.key }
	var want []string
	switch g := r.granularity(); g {
	case engine.PerTransaction:
		if k(t1[0]) != k(t1[1]) || k(t1[1]) != k(t1[2]) {
			t.Fatalf("%s declares %s but gave one transaction keys %d, %d, %d", tg.Engine, g, k(t1[0]), k(t1[1]), k(t1[2]))
		}
		want = []string{"4"}
	case engine.PerRecord:
		if !(k(t1[0]) < k(t1[1]) && k(t1[1]) < k(t1[2])) {
			t.Fatalf("%s declares %s but gave one transaction keys %d, %d, %d", tg.Engine, g, k(t1[0]), k(t1[1]), k(t1[2]))
		}
		want = []string{"2", "3", "4"}
	default:
		t.Fatalf("%s declares unknown granularity %v", tg.Engine, g)
	}
	if k(t2[0]) <= k(t1[2]) {
		t.Fatalf("second transaction's key %d not above the first's %d", k(t2[0]), k(t1[2]))
	}
	all := r.replayAll(durableOpts("t", start))
	wantIDs(t, "replay from the start", all.events, "1", "2", "3", "4")
	for i, ev := range all.events[:3] {
		if ev.Key != k(t1[i]) || ev.Index != t1[i].at.idx {
			t.Fatalf("event %s at %d.%d, the commit reported %s", ev.ID, ev.Key, ev.Index, t1[i].at)
		}
	}
	got := r.replayAll(durableOpts("t", table.Cursor{Key: k(t1[0])}))
	wantIDs(t, fmt.Sprintf("coarse resume from key(1) on a %s engine", r.granularity()), got.events, want...)
	// The composite cursor right after record 1 is exact on both families.
	got = r.replayAll(durableOpts("t", all.events[0].Cursor()))
	wantIDs(t, "composite resume after record 1", got.events, "2", "3", "4")
}

// scenarioSendFails runs C02/C03's shape: the sink refuses the
// refuseAt-th event, then a resume from the cursor (or from the naive
// "key of the last sent event" cursor) must lose nothing. It returns the
// resumed run for exact checks.
func scenarioSendFails(r *rig, tbl string, txns [][]string, refuseAt int, naive, composite bool) (run, run, error) {
	start := r.head()
	var expected []wrote
	for _, ids := range txns {
		expected = append(expected, r.txn(tbl, ids...)...)
	}
	o := durableOpts(tbl, start)
	o.Composite = composite
	first := r.followRun(o, refuseAt, nil)
	if !errors.Is(first.err, errRefused) {
		return first, run{}, fmt.Errorf("the sink's refusal was not reported: %w", first.err)
	}
	c := first.cursor
	if naive && len(first.events) > 0 {
		c = table.Cursor{Key: first.events[len(first.events)-1].Key}
	}
	o.Start = c
	second := r.replayAll(o)
	second.cursor = c
	return first, second, checkResume(expected, first.events, c, second.events, composite)
}

func caseSendFailsAfterTwoDeliveries(t T, tg Target) {
	r := newRig(t, tg)
	txns := [][]string{{"r1"}, {"r2"}, {"r3"}, {"r4"}, {"r5"}}
	first, second, err := scenarioSendFails(r, "t", txns, 3, false, false)
	if err != nil {
		t.Fatalf("%v", err)
	}
	wantIDs(t, "before the refusal", first.events, "r1", "r2")
	if c := second.cursor; c != (table.Cursor{Key: first.events[1].Key}) {
		t.Fatalf("cursor after the refusal = %s, want key(r2) = %d", c, first.events[1].Key)
	}
	wantIDs(t, "resume", second.events, "r3", "r4", "r5")

	// The same through a subscription: acks of r1, r2; r3 received but
	// never acknowledged (its send to the client failed); close.
	start := r.head()
	ws := slices.Concat(r.txn("s", "r1"), r.txn("s", "r2"), r.txn("s", "r3"), r.txn("s", "r4"), r.txn("s", "r5"))
	s := subscribe(t, r.db, durableOpts("s", start))
	evs := recvN(t, s, 3)
	_ = s.Ack(evs[0])
	_ = s.Ack(evs[1])
	_ = s.Close()
	if c := s.Checkpoint(); c != (table.Cursor{Key: ws[1].at.key}) {
		t.Fatalf("checkpoint after acking r1, r2 = %s, want key(r2) = %d", c, ws[1].at.key)
	}
	wantIDs(t, "resume from the checkpoint", r.replayAll(durableOpts("s", s.Checkpoint())).events, "r3", "r4", "r5")
}

func caseSendFailsInsideTransaction(t T, tg Target) {
	txns := [][]string{{"a"}, {"b", "c", "d"}, {"e"}}
	for _, composite := range []bool{false, true} {
		r := newRig(t, tg)
		_, second, err := scenarioSendFails(r, "t", txns, 3, false, composite)
		if err != nil {
			t.Fatalf("composite=%v: %v", composite, err)
		}
		want := []string{"c", "d", "e"}
		if r.granularity() == engine.PerTransaction && !composite {
			want = []string{"b", "c", "d", "e"} // the partial transaction again
		}
		wantIDs(t, fmt.Sprintf("resume after refusing c (%s, composite=%v)", r.granularity(), composite), second.events, want...)
	}
}

func caseFilterRejectsLastRecord(t T, tg Target) {
	r := newRig(t, tg)
	start := r.head()
	ws := slices.Concat(r.txn("t", "r1"), r.txn("t", "r2"), r.txn("t", "r3"))
	o := durableOpts("t", start)
	o.Filter = func(ev table.Event) bool { return ev.ID != "r3" }
	first := r.replayAll(o)
	wantIDs(t, "filtered replay", first.events, "r1", "r2")
	if c := first.cursor; c != (table.Cursor{Key: ws[2].at.key}) {
		t.Fatalf("cursor after a filtered last record = %s, want key(r3) = %d", c, ws[2].at.key)
	}
	o.Start = first.cursor
	wantIDs(t, "resume after completion", r.replayAll(o).events)
	s := subscribe(t, r.db, o)
	r.txn("t", "r4")
	wantIDs(t, "live after the resume", recvN(t, s, 1), "r4")
}

// scenarioCloseAtYield runs C05: one 150-record transaction, the reader
// stopped at its first yield (after 100 entries).
func scenarioCloseAtYield(r *rig, naive, composite bool) (run, run, error) {
	start := r.head()
	expected := r.txn("t", ids("r", 150)...)
	o := durableOpts("t", start)
	o.Composite = composite
	first := r.followRun(o, 0, newFaults().stop("yield", 1))
	if len(first.events) != 100 {
		return first, run{}, fmt.Errorf("stopped at the first yield after %d events, want 100", len(first.events))
	}
	c := first.cursor
	if naive {
		c = table.Cursor{Key: first.events[len(first.events)-1].Key}
	}
	o.Start = c
	second := r.replayAll(o)
	second.cursor = c
	return first, second, checkResume(expected, first.events, c, second.events, composite)
}

func caseCloseAtYieldIn150RecordTransaction(t T, tg Target) {
	for _, composite := range []bool{false, true} {
		r := newRig(t, tg)
		_, second, err := scenarioCloseAtYield(r, false, composite)
		if err != nil {
			t.Fatalf("composite=%v: %v", composite, err)
		}
		want := ids("r", 150)[100:]
		if r.granularity() == engine.PerTransaction && !composite {
			want = ids("r", 150)
		}
		wantIDs(t, fmt.Sprintf("resume after a close at the yield (%s, composite=%v)", r.granularity(), composite), second.events, want...)
	}
}

// pipelined commits one single-record transaction per id without waiting
// between them and returns the entries in order.
func (r *rig) pipelined(tbl string, ids []string) []wrote {
	r.t.Helper()
	type sub struct {
		h *engine.Handle
		v table.Version
	}
	subs := make([]sub, len(ids))
	for i, id := range ids {
		tx := r.db.Begin()
		if err := tx.Put(tbl, id, []byte(id)); err != nil {
			r.t.Fatalf("put: %v", err)
		}
		h, err := tx.Submit(r.t.Context())
		if err != nil {
			r.t.Fatalf("submit %s: %v", id, err)
		}
		subs[i] = sub{h, tx.Version()}
	}
	out := make([]wrote, len(ids))
	for i, s := range subs {
		res, err := s.h.Wait(r.t.Context())
		if err != nil {
			r.t.Fatalf("commit %s: %v", ids[i], err)
		}
		out[i] = wrote{table: tbl, id: ids[i], version: s.v, at: at{res.Keys[0], 0}}
	}
	return out
}

func caseCloseWhileWaitingForDrain(t T, tg Target) {
	r := newRig(t, tg)
	start := r.head()
	ws := r.pipelined("t", ids("r", 500))
	f := newFaults()
	blocked := make(chan struct{})
	f.onHit("blocked", func(n int) {
		if n == 1 {
			close(blocked)
		}
	})
	o := durableOpts("t", start)
	o.Buffer = 100
	o.Hooks = readerHooks(f)
	s := subscribe(t, r.db, o)
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the reader never waited for the consumer")
	}
	_ = s.Close() // while the reader waits to hand over r101
	if err := s.Err(); err != nil {
		t.Fatalf("close while waiting: Err = %v", err)
	}
	if c := s.Cursor(); c != (table.Cursor{Key: ws[99].at.key}) {
		t.Fatalf("handled cursor after the close = %s, want key(r100) = %d", c, ws[99].at.key)
	}
	if c := s.Checkpoint(); c != start {
		t.Fatalf("checkpoint with nothing acknowledged = %s, want the start %s", c, start)
	}
	queued := 0
	for range s.Events() {
		queued++
	}
	if queued != 100 {
		t.Fatalf("%d events were queued, want the high-water mark 100", queued)
	}
	wantIDs(t, "resume from the handled cursor", r.replayAll(durableOpts("t", s.Cursor())).events, ids("r", 500)[100:]...)
	wantIDs(t, "resume from the checkpoint", r.replayAll(durableOpts("t", s.Checkpoint())).events, ids("r", 500)...)
}

func caseForeignEntriesDoNotMoveCursor(t T, tg Target) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 7))
	r := newRig(t, tg)
	start := r.head()
	var expected []wrote
	aKeys := map[engine.LogKey]bool{start.Key: true}
	var txs []*table.Tx
	var orders [][]string
	var putsOf [][]wrote
	for i := 0; i < 60; i++ {
		tx := r.db.Begin()
		var order []string // table of each entry, in write order
		var puts []wrote
		for j, n := 0, rng.IntN(4); j < n; j++ {
			id := fmt.Sprintf("a%d-%d", i, j)
			_ = tx.Put("A", id, []byte(id))
			order = append(order, "A")
			puts = append(puts, wrote{table: "A", id: id})
		}
		for j, n := 0, rng.IntN(4); j < n; j++ {
			_ = tx.Put("B", fmt.Sprintf("b%d-%d", i, j), []byte("b"))
			order = append(order, "B")
		}
		switch rng.IntN(4) { // evict / lock-control style control entries
		case 0:
			_ = tx.Mark("A", []byte("evict"))
			order = append(order, "A")
		case 1:
			_ = tx.Mark("B", []byte("lock"))
			order = append(order, "B")
		}
		if len(order) == 0 {
			_ = tx.Put("B", fmt.Sprintf("b%d", i), []byte("b"))
			order = append(order, "B")
		}
		txs, orders, putsOf = append(txs, tx), append(orders, order), append(putsOf, puts)
	}
	for i, res := range r.submitAll(txs) {
		puts := putsOf[i]
		for j, tbl := range orders[i] {
			if tbl != "A" {
				continue
			}
			aKeys[res.Keys[j]] = true
			if j < len(puts) { // the A puts come first
				puts[j].at = at{res.Keys[j], indexIn(res.Keys, j)}
			}
		}
		expected = append(expected, puts...)
	}
	cursor := start
	seen := map[at]bool{}
	for round := 0; ; round++ {
		if round > 200 {
			t.Fatalf("no complete run after 200 resumes (seed %d)", seed)
		}
		o := durableOpts("A", cursor)
		refuse := 1 + rng.IntN(6)
		got := r.followRun(o, refuse, nil)
		for _, ev := range got.events {
			seen[evAt(ev)] = true
		}
		if !aKeys[got.cursor.Key] {
			t.Fatalf("cursor moved to %s, a key with no entry of table A (seed %d)", got.cursor, seed)
		}
		for _, w := range expected {
			if !seen[w.at] && got.cursor.Covers(w.at.key, w.at.idx) {
				t.Fatalf("cursor %s passes undelivered A entry %s at %s (seed %d)", got.cursor, w.id, w.at, seed)
			}
		}
		cursor = got.cursor
		if got.err == nil {
			break
		}
	}
	for _, w := range expected {
		if !seen[w.at] {
			t.Fatalf("A entry %s at %s never delivered across the resumes (seed %d)", w.id, w.at, seed)
		}
	}
}

func caseSupersededHandling(t T, tg Target) {
	r := newRig(t, tg)
	start := r.head()
	v := slices.Concat(r.txn("t", "X"), r.txn("t", "Y"), r.txn("t", "X"), r.txn("t", "X"))
	cur, err := r.db.Get(t.Context(), "t", "X")
	if err != nil {
		t.Fatalf("get X: %v", err)
	}
	latest := r.replayAll(table.SubscribeOptions{Table: "t", Start: start})
	wantIDs(t, "latest-state replay", latest.events, "Y", "X")
	x := latest.events[1]
	if x.Version != v[3].version || string(x.Value) != string(cur.Value) {
		t.Fatalf("latest-state X = version %d value %q, want version %d value %q", x.Version, x.Value, v[3].version, cur.Value)
	}
	if latest.cursor != (table.Cursor{Key: v[3].at.key}) {
		t.Fatalf("cursor after the latest-state replay = %s, want key(X v3) = %d", latest.cursor, v[3].at.key)
	}
	all := r.replayAll(durableOpts("t", start))
	wantIDs(t, "replay with superseded versions", all.events, "X", "Y", "X", "X")
	var xs []table.Version
	for _, ev := range all.events {
		if ev.ID == "X" {
			xs = append(xs, ev.Version)
		}
	}
	if !slices.Equal(xs, []table.Version{v[0].version, v[2].version, v[3].version}) || !(xs[0] < xs[1] && xs[1] < xs[2]) {
		t.Fatalf("X versions delivered %v, want %d < %d < %d", xs, v[0].version, v[2].version, v[3].version)
	}
}

// caseReplayToLiveHandoffUnderWrites (C09) checks the replay-to-live
// hand-off while a writer commits. The note asks for 10,000 existing records
// and 500 repeats; this runs one round over 3,000 records and 7 shorter
// rounds with a random writer phase, each forcing one commit exactly when
// the reader has exhausted the log and is about to wait for live entries.
func caseReplayToLiveHandoffUnderWrites(t T, tg Target) {
	r := newRig(t, tg)
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 9))
	for round := 0; round < 8; round++ {
		tbl := fmt.Sprintf("h%d", round)
		existing := 150
		if round == 0 {
			existing = 3000
		}
		start := r.head()
		var groups [][]string
		for i := 0; i < existing; i += 100 {
			groups = append(groups, ids(fmt.Sprintf("e%d-", i), min(100, existing-i)))
		}
		r.putTxns(tbl, groups)
		var forced sync.Once
		f := newFaults().onHit("live", func(int) { forced.Do(func() { r.txn(tbl, "forced") }) })
		if round%2 == 1 {
			// Widen the window between "log exhausted" and "waiting".
			f.delayAt("live", time.Duration(rng.IntN(500))*time.Microsecond)
		}
		o := durableOpts(tbl, start)
		o.Hooks = readerHooks(f)
		writes := 200
		phase := time.Duration(rng.IntN(2000)) * time.Microsecond
		done := make(chan []wrote, 1)
		go func() {
			// Pipelined: a commit every ~50µs whatever the engine's
			// commit latency.
			time.Sleep(phase)
			hs := make([]*engine.Handle, 0, writes)
			for i := 0; i < writes; i++ {
				tx := r.db.Begin()
				_ = tx.Put(tbl, fmt.Sprintf("w%d", i), nil)
				h, err := tx.Submit(t.Context())
				if err != nil {
					break
				}
				hs = append(hs, h)
				time.Sleep(50 * time.Microsecond)
			}
			var ws []wrote
			for i, h := range hs {
				res, err := h.Wait(t.Context())
				if err != nil {
					break
				}
				ws = append(ws, wrote{id: fmt.Sprintf("w%d", i), at: at{res.Keys[0], 0}})
			}
			done <- ws
		}()
		s := subscribe(t, r.db, o)
		ws := <-done
		if len(ws) != writes {
			t.Fatalf("writer committed %d of %d", len(ws), writes)
		}
		want := existing + writes + 1
		evs := recvN(t, s, want)
		// A sentinel after everything: any duplicate would arrive before it.
		r.txn(tbl, "sentinel")
		last := recvN(t, s, 1)
		if last[0].ID != "sentinel" {
			t.Fatalf("round %d: %s delivered after all %d entries, before the sentinel (seed %d)", round, last[0].ID, want, seed)
		}
		_ = s.Close()
		seen := map[at]bool{}
		for i, ev := range evs {
			if seen[evAt(ev)] {
				t.Fatalf("round %d: %s at %s delivered twice (seed %d)", round, ev.ID, evAt(ev), seed)
			}
			seen[evAt(ev)] = true
			if i > 0 && !evAt(evs[i-1]).before(evAt(ev)) {
				t.Fatalf("round %d: %s at %s after %s (seed %d)", round, ev.ID, evAt(ev), evAt(evs[i-1]), seed)
			}
		}
		for _, w := range ws {
			if !seen[w.at] {
				t.Fatalf("round %d: live write %s at %s never delivered (seed %d)", round, w.id, w.at, seed)
			}
		}
	}
}

func caseLiveGate(t T, tg Target) {
	r := newRig(t, tg)
	a := r.txn("t", "a") // K-1
	b := r.txn("t", "b") // K
	r.head()             // the shared tail has read a and b
	time.Sleep(10 * time.Millisecond)
	s := subscribe(t, r.db, durableOpts("t", table.Cursor{Key: b[0].at.key}))
	c := r.txn("t", "c") // K+1
	got := recvN(t, s, 1)
	wantIDs(t, "live after cursor K", got, "c")
	if got[0].Key != c[0].at.key || a[0].at.key >= b[0].at.key {
		t.Fatalf("delivered key %d, want %d", got[0].Key, c[0].at.key)
	}
	// Entries at or below the gate never arrive, also with more traffic.
	r.txn("t", "d")
	wantIDs(t, "next live", recvN(t, s, 1), "d")
	// Inclusive start from K delivers K itself, then K+1.
	o := durableOpts("t", table.Cursor{Key: b[0].at.key})
	o.Inclusive = true
	wantIDs(t, "inclusive start", r.replayAll(o).events, "b", "c", "d")
}

func caseFreshDurableSubscription(t T, tg Target) {
	r := newRig(t, tg)
	r.txn("t", "r1")
	session := r.head() // persisted before the subscription is acknowledged
	s := subscribe(t, r.db, durableOpts("t", session))
	r.txn("t", "r2")
	got := recvN(t, s, 1)
	wantIDs(t, "first live delivery", got, "r2")
	_ = s.Ack(got[0])
	_ = s.Close() // disconnect
	session = s.Checkpoint()
	r.txn("t", "r3")
	wantIDs(t, "resume", r.replayAll(durableOpts("t", session)).events, "r3")
}

func caseSingleRecordHistorySendFails(t T, tg Target) {
	r := newRig(t, tg)
	r.txn("t", "X")
	c := r.head()
	var xs []wrote
	for i := 0; i < 5; i++ {
		xs = append(xs, r.txn("t", "X", fmt.Sprintf("other%d", i))[0])
	}
	o := table.SubscribeOptions{Table: "t", ID: "X", Start: c, IncludeSuperseded: true}
	first := r.followRun(o, 3, nil)
	if len(first.events) != 2 || !errors.Is(first.err, errRefused) {
		t.Fatalf("history send: %d events, err %v; want 2 and the refusal", len(first.events), first.err)
	}
	o.Start = first.cursor
	second := r.replayAll(o)
	var got []table.Version
	for _, ev := range second.events {
		got = append(got, ev.Version)
	}
	want := []table.Version{xs[2].version, xs[3].version, xs[4].version}
	if !slices.Equal(got, want) {
		t.Fatalf("single-record resume delivered versions %v, want 3..5 = %v", got, want)
	}
	if err := checkResume(xs, first.events, first.cursor, second.events, false); err != nil {
		t.Fatalf("%v", err)
	}
	// Through a subscription: acks of versions 1, 2; the third fails.
	s := subscribe(t, r.db, table.SubscribeOptions{Table: "t", ID: "X", Start: c, IncludeSuperseded: true})
	evs := recvN(t, s, 3)
	_ = s.Ack(evs[0])
	_ = s.Ack(evs[1])
	_ = s.Close()
	o.Start = s.Checkpoint()
	got = got[:0]
	for _, ev := range r.replayAll(o).events {
		got = append(got, ev.Version)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resume from the checkpoint delivered versions %v, want %v", got, want)
	}
}
