package conformance

import (
	"fmt"

	"github.com/tidemark-io/tidemark/engine"
)

// caseLogStatsFollow asks for the log's figures after every commit and
// every truncation, as a broker's retention passes do, and checks each
// against a scan of the retained log: figures kept between calls must
// follow appends, truncations above and below what was counted, a log
// emptied and appended to again, and a reopen.
func caseLogStatsFollow(t T, tg Target) {
	dir := t.TempDir()
	e := tg.Open(t, dir)
	ctx := t.Context()
	var floor engine.LogKey
	check := func(e engine.Engine, when string) {
		t.Helper()
		st, err := e.LogStats(ctx)
		if err != nil {
			t.Fatalf("%s: log stats: %v", when, err)
		}
		got := scanAll(t, e, floor, false)
		if st.Entries != uint64(len(got)) {
			t.Fatalf("%s: log stats count %d entries, a scan finds %d", when, st.Entries, len(got))
		}
		if st.Floor != floor {
			t.Fatalf("%s: log stats floor %d, want %d", when, st.Floor, floor)
		}
		if len(got) == 0 {
			if st.First != 0 || st.Last != 0 {
				t.Fatalf("%s: empty log with first %d and last %d, want zeros", when, st.First, st.Last)
			}
			return
		}
		if st.First != got[0].Key || st.Last < got[len(got)-1].Key {
			t.Fatalf("%s: log stats first %d, last %d; a scan finds %d to %d", when, st.First, st.Last, got[0].Key, got[len(got)-1].Key)
		}
		if st.Bytes == 0 {
			t.Fatalf("%s: %d entries in 0 bytes", when, st.Entries)
		}
	}
	check(e, "empty")
	var keys []engine.LogKey
	n := 0
	for round := 1; round <= 6; round++ {
		for i := 0; i < 3; i++ {
			b := new(engine.Batch).Put([]byte(fmt.Sprint("k", n)), []byte("v"))
			for j := 0; j <= (round+i)%3; j++ {
				b.Append([]byte(fmt.Sprint(n, "-", j)))
			}
			n++
			keys = append(keys, commit(t, e, b).Keys...)
			check(e, fmt.Sprintf("round %d, commit %d", round, i))
		}
		if round%2 == 0 {
			floor = keys[len(keys)*2/3]
			if err := e.Truncate(ctx, floor); err != nil {
				t.Fatalf("truncate: %v", err)
			}
			check(e, fmt.Sprintf("round %d, truncated", round))
		}
	}
	floor = keys[len(keys)-1] + 1
	if err := e.Truncate(ctx, floor); err != nil {
		t.Fatalf("truncate all: %v", err)
	}
	check(e, "truncated whole")
	r := commit(t, e, new(engine.Batch).Append([]byte("again")))
	check(e, "appended after truncating whole")
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e = tg.Open(t, dir)
	defer e.Close()
	check(e, "reopened")
	commit(t, e, new(engine.Batch).Append([]byte("after reopen")))
	check(e, "appended after reopen")
	if got := scanAll(t, e, r.Keys[0], false); len(got) != 2 {
		t.Fatalf("after reopen, scan from the last commit = %q", values(got))
	}
}
