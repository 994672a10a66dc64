package conformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

func init() {
	register("engine",
		Case{Name: "open_unknown_engine", Run: caseOpenUnknown},
		Case{Name: "bad_input", Run: caseBadInput},
		Case{Name: "use_after_close", Run: caseUseAfterClose},
		Case{Name: "atomic_commit", Run: caseAtomicCommit},
		Case{Name: "failed_commit_applies_nothing", Run: caseFailedCommit},
		Case{Name: "expect_checks", Run: caseExpectChecks},
		Case{Name: "concurrent_compare_and_set", Run: caseConcurrentCAS},
		Case{Name: "checks_follow_rewrites", Run: caseChecksFollowRewrites},
		Case{Name: "snapshot_isolation", Run: caseSnapshotIsolation},
		Case{Name: "ordered_range_iteration", Run: caseOrderedIteration},
		Case{Name: "async_completion_order", Run: caseCompletionOrder},
		Case{Name: "deferred_commits", Run: caseDeferred},
		Case{Name: "ordered_callback", Run: caseOrdered},
		Case{Name: "log_keys_ordered_across_commits", Run: caseLogOrder},
		Case{Name: "log_key_granularity", Run: caseGranularity},
		Case{Name: "exclusive_scan_skips_whole_key", Run: caseExclusiveScan},
		Case{Name: "watch_after_durable", Run: caseWatch},
		Case{Name: "truncation", Run: caseTruncation},
		Case{Name: "log_stats_follow_appends_and_truncations", Run: caseLogStatsFollow},
		Case{Name: "reopen_keeps_completed_commits", Run: caseReopen},
		Case{Name: "second_open_refused", Run: caseSecondOpen},
		Case{Name: "sigkill_loses_no_completed_commit", Run: caseSigkill},
		Case{Name: "sigkill_loses_no_completed_commit_sync_none", Run: func(t T, tg Target) { sigkill(t, tg, engine.SyncNone) }},
		Case{Name: "sigkill_loses_no_completed_commit_sync_interval", Run: func(t T, tg Target) { sigkill(t, tg, engine.SyncInterval) }},
	)
}

func caseOpenUnknown(t T, tg Target) {
	_, err := engine.Open(t.Context(), "no-such-engine", engine.Options{Dir: t.TempDir()})
	wantErr(t, "open unknown engine", err, engine.ErrUnknownEngine)
	if !strings.Contains(err.Error(), tg.Engine) {
		t.Fatalf("unknown-engine error %q does not list the registered engine %q", err, tg.Engine)
	}
	_, err = tg.TryOpen(t.Context(), t.TempDir(), func(o *engine.Options) {
		o.Params = map[string]string{"no_such_param": "1"}
	})
	wantErr(t, "open with unknown parameter", err, engine.ErrInvalidOption)
}

func caseBadInput(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	submitErr := func(b *engine.Batch) error {
		h, err := e.Submit(ctx, b)
		if err == nil {
			_, err = h.Wait(ctx)
		}
		return err
	}
	wantErr(t, "nil batch", submitErr(nil), engine.ErrEmptyBatch)
	wantErr(t, "empty batch", submitErr(&engine.Batch{}), engine.ErrEmptyBatch)
	wantErr(t, "empty key", submitErr(new(engine.Batch).Put(nil, []byte("v"))), engine.ErrInvalidKey)
	wantErr(t, "empty delete key", submitErr(new(engine.Batch).Delete([]byte{})), engine.ErrInvalidKey)
	wantErr(t, "empty check key", submitErr(new(engine.Batch).ExpectAbsent(nil)), engine.ErrInvalidKey)
	wantErr(t, "oversized key", submitErr(new(engine.Batch).Put(bytesOf(engine.MaxKeySize+1, 'k'), nil)), engine.ErrKeyTooLarge)
	wantErr(t, "oversized value", submitErr(new(engine.Batch).Put([]byte("k"), bytesOf(engine.MaxValueSize+1, 'v'))), engine.ErrValueTooLarge)
	wantErr(t, "oversized log entry", submitErr(new(engine.Batch).Append(bytesOf(engine.MaxValueSize+1, 'v'))), engine.ErrValueTooLarge)
	big := new(engine.Batch)
	for i := 0; i <= engine.MaxBatchEntries; i++ {
		big.Put([]byte(fmt.Sprintf("k%05d", i)), nil)
	}
	wantErr(t, "oversized batch", submitErr(big), engine.ErrBatchTooLarge)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := e.Submit(cctx, new(engine.Batch).Put([]byte("cancelled"), []byte("v")).Append([]byte("x")))
	wantErr(t, "submit with cancelled context", err, context.Canceled)
	_, err = e.Snapshot(cctx)
	wantErr(t, "snapshot with cancelled context", err, context.Canceled)
	err = e.ScanLog(cctx, 0, false, func(engine.Entry) bool { return true })
	wantErr(t, "scan with cancelled context", err, context.Canceled)
	_, err = engine.Get(ctx, e, nil)
	wantErr(t, "get empty key", err, engine.ErrInvalidKey)

	// Nothing of the rejected batches landed, and the engine still works,
	// at its limits exactly.
	wantAbsent(t, e, "k00000")
	wantAbsent(t, e, "cancelled")
	if got := scanAll(t, e, 0, false); len(got) != 0 {
		t.Fatalf("rejected batches left %d log entries", len(got))
	}
	maxKey := bytesOf(engine.MaxKeySize, 'k')
	bigVal := bytesOf(1<<20, 'v')
	commit(t, e, new(engine.Batch).Put(maxKey, bigVal).Append(bigVal))
	v, ok := get(t, e, string(maxKey))
	if !ok || len(v) != len(bigVal) {
		t.Fatalf("max-size key: got %d bytes (present=%v), want %d", len(v), ok, len(bigVal))
	}
}

func caseUseAfterClose(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	commit(t, e, new(engine.Batch).Put([]byte("a"), []byte("1")).Append([]byte("a")))
	snap, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	it, err := snap.Iter(ctx, nil, nil)
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	watch := e.Watch(ctx)
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	_, err = e.Submit(ctx, new(engine.Batch).Put([]byte("b"), []byte("2")))
	wantErr(t, "submit after close", err, engine.ErrClosed)
	_, err = e.Snapshot(ctx)
	wantErr(t, "snapshot after close", err, engine.ErrClosed)
	_, err = engine.Get(ctx, e, []byte("a"))
	wantErr(t, "get after close", err, engine.ErrClosed)
	wantErr(t, "scan after close", e.ScanLog(ctx, 0, false, func(engine.Entry) bool { return true }), engine.ErrClosed)
	wantErr(t, "truncate after close", e.Truncate(ctx, 1), engine.ErrClosed)
	_, err = e.LogStats(ctx)
	wantErr(t, "log stats after close", err, engine.ErrClosed)
	_, err = snap.Get(ctx, []byte("a"))
	wantErr(t, "snapshot get after close", err, engine.ErrClosed)
	if it.Next() {
		t.Fatalf("iterator advanced after close")
	}
	wantErr(t, "iterator after close", it.Err(), engine.ErrClosed)
	_ = it.Close()
	_ = snap.Close()
	select {
	case _, ok := <-watch:
		for ok {
			_, ok = <-watch
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("watch channel not closed by engine close")
	}
	wantErr(t, "second close", e.Close(), engine.ErrClosed)
}

func caseAtomicCommit(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	commit(t, e, new(engine.Batch).Put([]byte("x"), []byte("old")).Put([]byte("gone"), []byte("soon")))
	b := new(engine.Batch).
		Put([]byte("a"), []byte("1")).
		Put([]byte("b"), []byte("2")).
		Put([]byte("x"), []byte("first")).
		Put([]byte("x"), []byte("second")).
		Delete([]byte("gone")).
		Delete([]byte("never-there")).
		Append([]byte("e1")).Append([]byte("e2"))
	res := commit(t, e, b)
	if len(res.Keys) != 2 {
		t.Fatalf("result has %d log keys, want 2", len(res.Keys))
	}
	wantValue(t, e, "a", "1")
	wantValue(t, e, "b", "2")
	wantValue(t, e, "x", "second")
	wantAbsent(t, e, "gone")
	if got := values(scanAll(t, e, 0, false)); !equalStrings(got, []string{"e1", "e2"}) {
		t.Fatalf("log = %q, want [e1 e2]", got)
	}
}

func caseFailedCommit(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	commit(t, e, new(engine.Batch).Put([]byte("guard"), []byte("v1")).Put([]byte("keep"), []byte("k")).Append([]byte("base")))
	b := new(engine.Batch).
		Expect([]byte("guard"), []byte("not-v1")).
		Put([]byte("new"), []byte("n")).
		Put([]byte("guard"), []byte("v2")).
		Delete([]byte("keep")).
		Append([]byte("must-not-appear"))
	_, err := engine.Commit(t.Context(), e, b)
	wantErr(t, "commit with failing check", err, engine.ErrConflict)
	wantAbsent(t, e, "new")
	wantValue(t, e, "guard", "v1")
	wantValue(t, e, "keep", "k")
	if got := values(scanAll(t, e, 0, false)); !equalStrings(got, []string{"base"}) {
		t.Fatalf("log after failed commit = %q, want [base]", got)
	}
	// A failed commit between two good ones leaves their order intact.
	r1 := commit(t, e, new(engine.Batch).Append([]byte("after")))
	if len(r1.Keys) != 1 {
		t.Fatalf("want one key, got %v", r1.Keys)
	}
	if got := values(scanAll(t, e, 0, false)); !equalStrings(got, []string{"base", "after"}) {
		t.Fatalf("log = %q, want [base after]", got)
	}
}

func caseExpectChecks(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	commit(t, e, new(engine.Batch).ExpectAbsent([]byte("slot")).Put([]byte("slot"), []byte("first")))
	_, err := engine.Commit(ctx, e, new(engine.Batch).ExpectAbsent([]byte("slot")).Put([]byte("slot"), []byte("second")))
	wantErr(t, "put-if-absent on a present key", err, engine.ErrConflict)
	wantValue(t, e, "slot", "first")
	commit(t, e, new(engine.Batch).Expect([]byte("slot"), []byte("first")).Put([]byte("slot"), []byte("third")))
	wantValue(t, e, "slot", "third")
	_, err = engine.Commit(ctx, e, new(engine.Batch).Expect([]byte("missing"), []byte("x")).Put([]byte("other"), []byte("y")))
	wantErr(t, "expect on absent key", err, engine.ErrConflict)
	wantAbsent(t, e, "other")
	commit(t, e, new(engine.Batch).Expect([]byte("slot"), []byte("third")).Delete([]byte("slot")))
	commit(t, e, new(engine.Batch).ExpectAbsent([]byte("slot")).Append([]byte("checked")))
	// A check-only batch commits without writing.
	commit(t, e, new(engine.Batch).ExpectAbsent([]byte("slot")))
	// An empty value is a value, not absence.
	commit(t, e, new(engine.Batch).Put([]byte("empty"), []byte{}))
	commit(t, e, new(engine.Batch).Expect([]byte("empty"), nil).Append([]byte("e")))
	_, err = engine.Commit(ctx, e, new(engine.Batch).ExpectAbsent([]byte("empty")))
	wantErr(t, "absent check on an empty value", err, engine.ErrConflict)
}

// caseConcurrentCAS increments counters from many goroutines with
// expect-then-put and retries on conflict: every increment must land once,
// including when the engine groups concurrent commits into one write.
func caseConcurrentCAS(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	const workers, each = 8, 40
	keys := [][]byte{[]byte("counter/a"), []byte("counter/b")}
	enc := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	for _, k := range keys {
		commit(t, e, new(engine.Batch).Put(k, enc(0)))
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; i < each; i++ {
				k := keys[rng.IntN(len(keys))]
				for attempt := 0; ; attempt++ {
					cur, err := engine.Get(ctx, e, k)
					if err != nil {
						errs <- err
						return
					}
					n := binary.BigEndian.Uint64(cur)
					_, err = engine.Commit(ctx, e, new(engine.Batch).Expect(k, cur).Put(k, enc(n+1)).Append(k))
					if err == nil {
						break
					}
					if !errors.Is(err, engine.ErrConflict) || attempt > 10000 {
						errs <- fmt.Errorf("increment %s: %w", k, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%v", err)
	}
	var total uint64
	for _, k := range keys {
		v, _ := get(t, e, string(k))
		total += binary.BigEndian.Uint64(v)
	}
	if total != workers*each {
		t.Fatalf("counters sum to %d, want %d: an increment was lost or doubled", total, workers*each)
	}
	if n := len(scanAll(t, e, 0, false)); n != workers*each {
		t.Fatalf("log has %d increment entries, want %d", n, workers*each)
	}
}

func caseSnapshotIsolation(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	commit(t, e, new(engine.Batch).Put([]byte("k1"), []byte("v1")).Put([]byte("k2"), []byte("v1")))
	snap, err := e.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	commit(t, e, new(engine.Batch).Put([]byte("k1"), []byte("v2")).Delete([]byte("k2")).Put([]byte("k3"), []byte("v2")))
	for k, want := range map[string]string{"k1": "v1", "k2": "v1"} {
		v, err := snap.Get(ctx, []byte(k))
		if err != nil || string(v) != want {
			t.Fatalf("snapshot get %s = %q, %v; want %q", k, v, err, want)
		}
	}
	_, err = snap.Get(ctx, []byte("k3"))
	wantErr(t, "snapshot get of a later key", err, engine.ErrNotFound)
	snapRange := func(lower, upper string) []string {
		t.Helper()
		it, err := snap.Iter(ctx, []byte(lower), []byte(upper))
		if err != nil {
			t.Fatalf("iter: %v", err)
		}
		defer it.Close()
		var got []string
		for it.Next() {
			got = append(got, string(it.Key())+"="+string(it.Value()))
		}
		if err := it.Err(); err != nil {
			t.Fatalf("iter: %v", err)
		}
		return got
	}
	if got, want := snapRange("k", "l"), []string{"k1=v1", "k2=v1"}; !equalStrings(got, want) {
		t.Fatalf("snapshot range = %q, want %q", got, want)
	}
	// Ranges read one after the other in a snapshot (as a view reads
	// several tables) each see their own bounds and the snapshot's state,
	// also with an iterator of another range still open.
	if got, want := snapRange("k2", "l"), []string{"k2=v1"}; !equalStrings(got, want) {
		t.Fatalf("second snapshot range = %q, want %q", got, want)
	}
	if got := snapRange("k3", "l"); len(got) != 0 {
		t.Fatalf("snapshot range over a later key = %q, want none", got)
	}
	open, err := snap.Iter(ctx, []byte("k1"), []byte("k2"))
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	if got, want := snapRange("k", "l"), []string{"k1=v1", "k2=v1"}; !equalStrings(got, want) {
		t.Fatalf("snapshot range beside an open iterator = %q, want %q", got, want)
	}
	if !open.Next() || string(open.Key()) != "k1" || open.Next() {
		t.Fatalf("the open iterator over [k1, k2) did not give k1 alone (err %v)", open.Err())
	}
	open.Close()
	wantValue(t, e, "k1", "v2")
	wantAbsent(t, e, "k2")
	wantValue(t, e, "k3", "v2")
}

func caseOrderedIteration(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	var keys []string
	for i := 0; i < 300; i++ {
		keys = append(keys, fmt.Sprintf("r/%03d", i))
	}
	keys = append(keys, "q", "r", "r/", "s", "r0", "r\x00", "r/\xff")
	shuffled := slices.Clone(keys)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i := 0; i < len(shuffled); i += 50 {
		b := new(engine.Batch)
		for _, k := range shuffled[i:min(i+50, len(shuffled))] {
			b.Put([]byte(k), []byte("v:"+k))
		}
		commit(t, e, b)
	}
	rangeOf := func(lo, hi []byte) []string {
		snap, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		defer snap.Close()
		it, err := snap.Iter(ctx, lo, hi)
		if err != nil {
			t.Fatalf("iter: %v", err)
		}
		defer it.Close()
		var out []string
		for it.Next() {
			if string(it.Value()) != "v:"+string(it.Key()) {
				t.Fatalf("key %q has value %q", it.Key(), it.Value())
			}
			out = append(out, string(it.Key()))
		}
		if err := it.Err(); err != nil {
			t.Fatalf("iter: %v", err)
		}
		return out
	}
	want := func(lo, hi string, unbounded bool) []string {
		var out []string
		for _, k := range keys {
			if k >= lo && (unbounded || k < hi) {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	if got, w := rangeOf([]byte("r/"), []byte("r0")), want("r/", "r0", false); !equalStrings(got, w) {
		t.Fatalf("range [r/, r0): got %d keys %q..., want %d", len(got), head(got), len(w))
	}
	if got, w := rangeOf([]byte("r/100"), []byte("r/200")), want("r/100", "r/200", false); !equalStrings(got, w) {
		t.Fatalf("range [r/100, r/200): got %q..., want %q...", head(got), head(w))
	}
	if got, w := rangeOf([]byte("r0"), nil), want("r0", "", true); !equalStrings(got, w) {
		t.Fatalf("range [r0, end): got %q, want %q", got, w)
	}
	if got := rangeOf([]byte("t"), nil); len(got) != 0 {
		t.Fatalf("range past the last key: %q", got)
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// caseCompletionOrder submits many commits without waiting and checks that
// a handle never completes before one submitted earlier, and that log keys
// follow submission order.
func caseCompletionOrder(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	const n = 400
	hs := make([]*engine.Handle, n)
	for i := range hs {
		h, err := e.Submit(ctx, new(engine.Batch).Put([]byte(fmt.Sprintf("c/%04d", i)), []byte("v")).Append([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		hs[i] = h
	}
	checkCompletionOrder(t, hs)
}

// checkCompletionOrder fails unless every handle of hs completed after all
// the handles before it, without error, with one log key above the one
// before it.
func checkCompletionOrder(t T, hs []*engine.Handle) {
	t.Helper()
	var mu sync.Mutex
	var violations []string
	var wg sync.WaitGroup
	for i := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-hs[i].Done()
			for j := 0; j < i; j++ {
				select {
				case <-hs[j].Done():
				default:
					mu.Lock()
					violations = append(violations, fmt.Sprintf("commit %d completed before commit %d", i, j))
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(violations) > 0 {
		t.Fatalf("%d out-of-order completions, first: %s", len(violations), violations[0])
	}
	var prev engine.LogKey
	for i, h := range hs {
		res, err := h.Result()
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if len(res.Keys) != 1 || res.Keys[0] <= prev {
			t.Fatalf("commit %d: keys %v not above previous %d", i, res.Keys, prev)
		}
		prev = res.Keys[0]
	}
}

// caseLogOrder has concurrent submitters write commits of random sizes and
// checks the scanned log against what each commit reported.
func caseLogOrder(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	const workers, each = 16, 40
	type rec struct {
		keys []engine.LogKey
		vals []string
	}
	results := make([][]rec, workers)
	var wg sync.WaitGroup
	var failed sync.Once
	var firstErr error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for i := 0; i < each; i++ {
				b := new(engine.Batch)
				r := rec{}
				for j := 0; j < 1+rng.IntN(4); j++ {
					v := fmt.Sprintf("w%02d/c%03d/e%d", w, i, j)
					b.Append([]byte(v))
					r.vals = append(r.vals, v)
				}
				res, err := engine.Commit(ctx, e, b)
				if err != nil {
					failed.Do(func() { firstErr = err })
					return
				}
				r.keys = res.Keys
				results[w] = append(results[w], r)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("commit: %v", firstErr)
	}
	es := scanAll(t, e, 0, false)
	if err := checkLogOrder(e.Granularity(), es); err != nil {
		t.Fatalf("log order: %v", err)
	}
	byVal := make(map[string]engine.LogKey, len(es))
	for _, en := range es {
		if _, dup := byVal[string(en.Value)]; dup {
			t.Fatalf("entry %q appears twice in the log", en.Value)
		}
		byVal[string(en.Value)] = en.Key
	}
	total := 0
	for w, rs := range results {
		var prev engine.LogKey
		for i, r := range rs {
			if len(r.keys) != len(r.vals) {
				t.Fatalf("worker %d commit %d: %d keys for %d entries", w, i, len(r.keys), len(r.vals))
			}
			for j, v := range r.vals {
				total++
				k, ok := byVal[v]
				if !ok {
					t.Fatalf("entry %q missing from the log", v)
				}
				if k != r.keys[j] {
					t.Fatalf("entry %q: scan says key %d, commit said %d", v, k, r.keys[j])
				}
				if k <= prev && !(j > 0 && e.Granularity() == engine.PerTransaction && k == prev) {
					t.Fatalf("worker %d: key %d of a later commit not above %d", w, k, prev)
				}
				prev = k
			}
		}
	}
	if total != len(es) {
		t.Fatalf("log has %d entries, committed %d", len(es), total)
	}
}

func caseGranularity(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	res := commit(t, e, new(engine.Batch).Append([]byte("1")).Append([]byte("2")).Append([]byte("3")))
	es := scanAll(t, e, 0, false)
	if len(es) != 3 {
		t.Fatalf("scan returned %d entries, want 3", len(es))
	}
	switch e.Granularity() {
	case engine.PerTransaction:
		for i, en := range es {
			if en.Key != res.Keys[0] || en.Index != uint32(i) || en.Count != 3 {
				t.Fatalf("per-transaction entry %d = key %d index %d count %d; want key %d index %d count 3",
					i, en.Key, en.Index, en.Count, res.Keys[0], i)
			}
		}
	case engine.PerRecord:
		for i, en := range es {
			if en.Key != res.Keys[i] || en.Index != 0 || en.Count != 1 {
				t.Fatalf("per-record entry %d = key %d index %d count %d; want key %d index 0 count 1",
					i, en.Key, en.Index, en.Count, res.Keys[i])
			}
			if i > 0 && en.Key <= es[i-1].Key {
				t.Fatalf("per-record keys not increasing: %d after %d", en.Key, es[i-1].Key)
			}
		}
	default:
		t.Fatalf("engine reports unknown granularity %v", e.Granularity())
	}
}

// caseExclusiveScan is the write-up's measured example: one commit writes
// 1, 2, 3, a later one writes 4; an exclusive scan from key(1) yields {4}
// on shared keys and {2, 3, 4} on per-record keys.
func caseExclusiveScan(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	a := commit(t, e, new(engine.Batch).Append([]byte("1")).Append([]byte("2")).Append([]byte("3")))
	commit(t, e, new(engine.Batch).Append([]byte("4")))
	got := values(scanAll(t, e, a.Keys[0], true))
	want := []string{"2", "3", "4"}
	if e.Granularity() == engine.PerTransaction {
		want = []string{"4"}
	}
	if !equalStrings(got, want) {
		t.Fatalf("exclusive scan from key(1) = %q, want %q (%v)", got, want, e.Granularity())
	}
	if got := values(scanAll(t, e, a.Keys[0], false)); !equalStrings(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("inclusive scan from key(1) = %q, want [1 2 3 4]", got)
	}
	// Stopping early stops the scan.
	n := 0
	if err := e.ScanLog(t.Context(), 0, false, func(engine.Entry) bool { n++; return n < 2 }); err != nil || n != 2 {
		t.Fatalf("scan stopped by fn: visited %d entries, err %v; want 2", n, err)
	}
	if got := scanAll(t, e, ^engine.LogKey(0), true); len(got) != 0 {
		t.Fatalf("exclusive scan from the highest key returned %d entries", len(got))
	}
}

func caseWatch(t T, tg Target) {
	e := tg.Open(t, t.TempDir())
	ctx := t.Context()
	w := e.Watch(ctx)
	for i := 0; i < 30; i++ {
		drain(w)
		h, err := e.Submit(ctx, new(engine.Batch).Append([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		select {
		case <-w:
		case <-time.After(10 * time.Second):
			t.Fatalf("watch did not fire for commit %d", i)
		}
		select {
		case <-h.Done():
		default:
			t.Fatalf("watch fired before commit %d was durable", i)
		}
		res, _ := h.Result()
		got := scanAll(t, e, res.Keys[0], false)
		if len(got) != 1 || string(got[0].Value) != fmt.Sprint(i) {
			t.Fatalf("after watch, scan from the new key = %q", values(got))
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	w2 := e.Watch(wctx)
	cancel()
	select {
	case _, ok := <-w2:
		if ok {
			if _, ok = <-w2; ok {
				t.Fatalf("watch channel still open after its context ended")
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("watch channel not closed after its context ended")
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func caseTruncation(t T, tg Target) {
	dir := t.TempDir()
	e := tg.Open(t, dir)
	ctx := t.Context()
	var keys []engine.LogKey
	for i := 1; i <= 5; i++ {
		r := commit(t, e, new(engine.Batch).Put([]byte(fmt.Sprintf("d%d", i)), []byte("v")).Append([]byte(fmt.Sprint(i))).Append([]byte(fmt.Sprint(i, "b"))))
		keys = append(keys, r.Keys[0])
	}
	if err := e.Truncate(ctx, keys[2]); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	check := func(e engine.Engine) {
		t.Helper()
		_, err := scan(ctx, e, 0, false)
		wantErr(t, "scan from below the floor", err, engine.ErrLogTruncated)
		got := values(scanAll(t, e, keys[2], false))
		if !equalStrings(got, []string{"3", "3b", "4", "4b", "5", "5b"}) {
			t.Fatalf("scan from the floor = %q", got)
		}
		st, err := e.LogStats(ctx)
		if err != nil {
			t.Fatalf("log stats: %v", err)
		}
		if st.First != keys[2] || st.Last < keys[4] || st.Entries != 6 || st.Floor != keys[2] {
			t.Fatalf("log stats = %+v; want first %d, last >= %d, 6 entries, floor %d", st, keys[2], keys[4], keys[2])
		}
		for i := 1; i <= 5; i++ {
			wantValue(t, e, fmt.Sprintf("d%d", i), "v")
		}
	}
	check(e)
	// Truncating below the floor again is a no-op.
	if err := e.Truncate(ctx, keys[0]); err != nil {
		t.Fatalf("truncate below floor: %v", err)
	}
	check(e)
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e2 := tg.Open(t, dir)
	check(e2)
	r := commit(t, e2, new(engine.Batch).Append([]byte("6")))
	if r.Keys[0] <= keys[4] {
		t.Fatalf("key after reopen %d not above %d", r.Keys[0], keys[4])
	}
	// Truncating everything leaves an empty log whose next key still rises.
	if err := e2.Truncate(ctx, r.Keys[0]+1); err != nil {
		t.Fatalf("truncate all: %v", err)
	}
	if got := scanAll(t, e2, r.Keys[0]+1, false); len(got) != 0 {
		t.Fatalf("log after truncating all: %q", values(got))
	}
	if err := e2.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e3 := tg.Open(t, dir)
	r2 := commit(t, e3, new(engine.Batch).Append([]byte("7")))
	if r2.Keys[0] <= r.Keys[0] {
		t.Fatalf("key after truncating all and reopening %d not above %d", r2.Keys[0], r.Keys[0])
	}
}

// caseSecondOpen: a data directory an open engine holds is refused to a
// second engine with ErrInUse (two writers would corrupt it or break the
// first one's view of it), and is free again once the first closes.
func caseSecondOpen(t T, tg Target) {
	dir := t.TempDir()
	e, err := tg.TryOpen(t.Context(), dir)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	commit(t, e, new(engine.Batch).Put([]byte("k"), []byte("v")))
	e2, err := tg.TryOpen(t.Context(), dir)
	if err == nil {
		_ = e2.Close()
		_ = e.Close()
		t.Fatalf("a second engine opened %s while the first held it", dir)
	}
	if !errors.Is(err, engine.ErrInUse) {
		_ = e.Close()
		t.Fatalf("second open: %v, want an error wrapping engine.ErrInUse", err)
	}
	wantValue(t, e, "k", "v")
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e3 := tg.Open(t, dir)
	wantValue(t, e3, "k", "v")
}

// caseReopen checks completed commits survive a clean close, that a scan
// of the log's end after a reopen gets the whole last commit, and that
// keys stay monotonic when the clock moved backwards across the restart.
// An empty log reopened scans empty, then holds what is committed to it.
func caseReopen(t T, tg Target) {
	empty := t.TempDir()
	e0 := tg.Open(t, empty)
	commit(t, e0, new(engine.Batch).Put([]byte("k"), []byte("v")))
	if err := e0.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e0 = tg.Open(t, empty)
	if es := scanAll(t, e0, 0, false); len(es) != 0 {
		t.Fatalf("an empty log after reopen holds %q", values(es))
	}
	commit(t, e0, new(engine.Batch).Append([]byte("first")))
	if got := values(scanAll(t, e0, 0, false)); !equalStrings(got, []string{"first"}) {
		t.Fatalf("a log empty at reopen, after one commit: %q, want [first]", got)
	}
	if err := e0.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	dir := t.TempDir()
	now := time.Now()
	e := tg.Open(t, dir, func(o *engine.Options) { o.Clock = func() time.Time { return now } })
	for i := 0; i < 50; i++ {
		commit(t, e, new(engine.Batch).Put([]byte(fmt.Sprintf("r/%02d", i)), []byte(fmt.Sprint(i))).Append([]byte(fmt.Sprint(i))))
	}
	// The last commit with log entries has three: a reader of the log's
	// end after the reopen (as the table layer's head is) gets them all.
	lastCommit := commit(t, e, new(engine.Batch).Append([]byte("50")).Append([]byte("51")).Append([]byte("52")))
	commit(t, e, new(engine.Batch).Delete([]byte("r/00")))
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	earlier := now.Add(-10 * time.Second)
	e2 := tg.Open(t, dir, func(o *engine.Options) { o.Clock = func() time.Time { return earlier } })
	wantAbsent(t, e2, "r/00")
	for i := 1; i < 50; i++ {
		wantValue(t, e2, fmt.Sprintf("r/%02d", i), fmt.Sprint(i))
	}
	es := scanAll(t, e2, 0, false)
	if len(es) != 53 {
		t.Fatalf("log after reopen has %d entries, want 53", len(es))
	}
	if got := values(scanAll(t, e2, lastCommit.Keys[0], false)); !equalStrings(got, []string{"50", "51", "52"}) {
		t.Fatalf("scan from the last commit after reopen = %q, want [50 51 52]", got)
	}
	last := lastCommit.Keys[len(lastCommit.Keys)-1] // the highest key persisted
	r := commit(t, e2, new(engine.Batch).Append([]byte("after")))
	if r.Keys[0] <= last {
		t.Fatalf("after a clock rollback the new key %d is not above the persisted %d", r.Keys[0], last)
	}
	if got := values(scanAll(t, e2, last, true)); !equalStrings(got, []string{"after"}) {
		t.Fatalf("resume from the persisted key = %q, want [after]", got)
	}
}
