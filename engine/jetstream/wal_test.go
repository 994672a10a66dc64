//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine"
)

// openWALAt opens a single-writer engine on dir.
func openWALAt(t *testing.T, dir string) *db {
	t.Helper()
	e, err := open(t.Context(), engine.Options{Dir: dir})
	if err != nil {
		t.Fatalf("open jetstream engine: %v", err)
	}
	return e.(*db)
}

// crash closes d the way a killed process leaves the stream: the
// materializer does not run a last time.
func crash(t *testing.T, d *db) {
	t.Helper()
	d.mat.mu.Lock()
	d.mat.noFinal = true
	d.mat.mu.Unlock()
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestWALRecoversEveryState commits random puts, deletes and log entries
// through the single-writer layout, materializes some generations in
// between (so key subjects hold values newer, older and as old as the
// mark), then reopens after a crash or a clean close and checks every key
// and every log entry against a model.
func TestWALRecoversEveryState(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 11))
	model := map[string]string{}
	var logs []string
	var keys []engine.LogKey
	d := openWALAt(t, dir)
	for round := range 6 {
		for i := range 60 {
			var hs []*engine.Handle
			for j := range 1 + rng.IntN(4) {
				b := new(engine.Batch)
				for range 1 + rng.IntN(3) {
					k := fmt.Sprintf("k%02d", rng.IntN(40))
					if rng.IntN(3) == 0 {
						b.Delete([]byte(k))
						delete(model, k)
					} else {
						v := fmt.Sprintf("v%d.%d.%d", round, i, j)
						b.Put([]byte(k), []byte(v))
						model[k] = v
					}
				}
				if rng.IntN(2) == 0 {
					e := fmt.Sprintf("e%d.%d.%d", round, i, j)
					b.Append([]byte(e))
					logs = append(logs, e)
				}
				h, err := d.Submit(ctx, b)
				if err != nil {
					t.Fatalf("submit: %v", err)
				}
				hs = append(hs, h)
			}
			for _, h := range hs {
				res, err := h.Wait(ctx)
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
				keys = append(keys, res.Keys...)
			}
			if rng.IntN(20) == 0 {
				if err := d.mat.flush(false); err != nil {
					t.Fatalf("materialize: %v", err)
				}
			}
		}
		if !slices.IsSorted(keys) {
			t.Fatalf("round %d: log keys out of order: %v", round, keys)
		}
		if round%2 == 0 {
			crash(t, d)
		} else if err := d.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		d = openWALAt(t, dir)
		checkModel(t, d, model, logs, keys)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func checkModel(t *testing.T, d *db, model map[string]string, logs []string, keys []engine.LogKey) {
	t.Helper()
	ctx := t.Context()
	snap, err := d.Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Close()
	it, err := snap.Iter(ctx, nil, nil)
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	got := map[string]string{}
	for it.Next() {
		got[string(it.Key())] = string(it.Value())
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		t.Fatalf("iter: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(model) {
		t.Fatalf("after reopen the keys are\n%v\nwant\n%v", got, model)
	}
	var gotLogs []string
	var gotKeys []engine.LogKey
	if err := d.ScanLog(ctx, 0, false, func(e engine.Entry) bool {
		gotLogs = append(gotLogs, string(e.Value))
		gotKeys = append(gotKeys, e.Key)
		return true
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	if !slices.Equal(gotLogs, logs) || !slices.Equal(gotKeys, keys) {
		t.Fatalf("after reopen the log is %v at %v, want %v at %v", gotLogs, gotKeys, logs, keys)
	}
}

// TestWALTruncateInsideTransaction truncates at an entry in the middle of
// one transaction message and checks that the scan, the stats and a scan
// from below agree on the floor, also after the materializer purged what
// it could and after a reopen.
func TestWALTruncateInsideTransaction(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openWALAt(t, dir)
	first, err := engine.Commit(ctx, d, new(engine.Batch).Append([]byte("a0")))
	if err != nil {
		t.Fatal(err)
	}
	res, err := engine.Commit(ctx, d, new(engine.Batch).Append([]byte("b0")).Append([]byte("b1")).Append([]byte("b2")).Put([]byte("k"), []byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Append([]byte("c0"))); err != nil {
		t.Fatal(err)
	}
	if s1, _ := splitKey(res.Keys[0]); s1 != uint64(res.Keys[2])>>logShift {
		t.Fatalf("the entries of one commit span messages: %v", res.Keys)
	}
	if err := d.Truncate(ctx, res.Keys[1]); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		st, err := d.LogStats(ctx)
		if err != nil {
			t.Fatalf("%s: stats: %v", when, err)
		}
		if st.Entries != 3 || st.First != res.Keys[1] || st.Floor != res.Keys[1] {
			t.Fatalf("%s: stats %+v, want 3 entries from %d", when, st, res.Keys[1])
		}
		var got []string
		if err := d.ScanLog(ctx, res.Keys[1], false, func(e engine.Entry) bool {
			got = append(got, string(e.Value))
			return true
		}); err != nil || !slices.Equal(got, []string{"b1", "b2", "c0"}) {
			t.Fatalf("%s: scan from the floor = %v, %v", when, got, err)
		}
		err = d.ScanLog(ctx, first.Keys[0], false, func(engine.Entry) bool { return true })
		if !errors.Is(err, engine.ErrLogTruncated) {
			t.Fatalf("%s: scan from below the floor: %v, want ErrLogTruncated", when, err)
		}
	}
	check("after truncate")
	if err := d.mat.flush(true); err != nil {
		t.Fatal(err)
	}
	info, err := d.st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Msgs; n == 0 {
		t.Fatal("the stream is empty after a purge")
	}
	check("after purge")
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openWALAt(t, dir)
	defer d.Close()
	check("after reopen")
	if v, err := engine.Get(ctx, d, []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("k = %q, %v after reopen", v, err)
	}
}

// TestWALKeepsOneMessagePerKey rewrites and deletes keys many times and
// checks that, once materialized, the stream holds one message per live
// key and no transaction without log entries.
func TestWALKeepsOneMessagePerKey(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	for i := range 200 {
		b := new(engine.Batch).Put([]byte(fmt.Sprintf("live%d", i%10)), []byte(fmt.Sprint(i)))
		b.Put([]byte(fmt.Sprintf("gone%d", i)), []byte("x"))
		if i > 0 {
			b.Delete([]byte(fmt.Sprintf("gone%d", i-1)))
		}
		if _, err := engine.Commit(ctx, d, b); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			if err := d.mat.flush(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Delete([]byte("gone199"))); err != nil {
		t.Fatal(err)
	}
	if err := d.mat.flush(true); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	info, err := d.st.Info(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(indexRecords(t, d)); n != 10 {
		t.Fatalf("the index holds %d keys, want the 10 live ones (deleted keys leave it)", n)
	}
	// Ten live keys, a delete marker for each "gone" key that was
	// materialized before its delete, the mark; no transaction.
	if n := info.State.Msgs; n < 11 || n > 11+5 {
		t.Fatalf("stream holds %d messages, want the 10 live keys, the mark and at most a few delete markers", n)
	}
}

// TestWALKeysFoldedEarlyAreMaterialized: keys the materializer folded out
// of the written list before a run (what a long list makes it do) are
// written by the runs like the others: after two runs moved the mark past
// their transactions and purged them, a crash and a reopen still find
// every value on its key subject.
func TestWALKeysFoldedEarlyAreMaterialized(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openWALAt(t, dir)
	model := map[string]string{}
	for i := range 40 {
		k, v := fmt.Sprintf("k%02d", i%20), fmt.Sprint(i)
		if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte(k), []byte(v))); err != nil {
			t.Fatal(err)
		}
		model[k] = v
		if i%5 == 4 {
			d.mat.mu.Lock()
			d.mat.collect()
			d.mat.mu.Unlock()
		}
	}
	for range 2 {
		if err := d.mat.flush(false); err != nil {
			t.Fatal(err)
		}
	}
	applied, _ := d.view.state()
	d.mat.mu.Lock()
	mark := d.mat.mark
	d.mat.mu.Unlock()
	if mark < applied {
		t.Fatalf("after two runs the mark is %d, below the last transaction %d", mark, applied)
	}
	crash(t, d)
	d = openWALAt(t, dir)
	defer d.Close()
	checkModel(t, d, model, nil, nil)
}

// TestCommitModeIsTheStreams refuses to open a stream with the other commit
// protocol, and commit=wal with a url.
func TestCommitModeIsTheStreams(t *testing.T) {
	dir := t.TempDir()
	d := openWALAt(t, dir)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := engine.Open(t.Context(), Name, engine.Options{Dir: dir, Params: map[string]string{"commit": "batch"}})
	if !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("open a wal stream with commit=batch: %v, want ErrInvalidOption", err)
	}
	_, err = engine.Open(t.Context(), Name, engine.Options{Params: map[string]string{"commit": "wal", "url": "nats://127.0.0.1:1"}})
	if !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("commit=wal with a url: %v, want ErrInvalidOption", err)
	}
	_, err = engine.Open(t.Context(), Name, engine.Options{Dir: dir, Params: map[string]string{"commit": "fast"}})
	if !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("commit=fast: %v, want ErrInvalidOption", err)
	}
}

// TestBatchKeepsOneMessagePerKey: on a shared stream too, a key's subject
// holds only its newest write.
func TestBatchKeepsOneMessagePerKey(t *testing.T) {
	ctx := t.Context()
	d := openEngine(t, map[string]string{"commit": "batch"})
	for i := range 50 {
		b := new(engine.Batch).Put([]byte("k"), []byte(fmt.Sprint(i))).Put([]byte("other"), []byte(fmt.Sprint(i)))
		if i%2 == 0 {
			b.ExpectAbsent([]byte(fmt.Sprint("absent", i)))
		}
		if _, err := engine.Commit(ctx, d, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Delete([]byte("k"))); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"k", "other"} {
		subj := d.dataSubject([]byte(k))
		info, err := d.st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Subjects[subj]; n != 1 {
			t.Fatalf("subject of %q holds %d messages, want 1", k, n)
		}
	}
}

// TestWALWatchAfterHandle: Watch never signals a commit whose handle has
// not completed yet.
func TestWALWatchAfterHandle(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	for i := range 300 {
		w := d.Watch(ctx)
		h, err := d.Submit(ctx, new(engine.Batch).Append([]byte(fmt.Sprint(i))))
		if err != nil {
			t.Fatal(err)
		}
		<-w
		select {
		case <-h.Done():
		default:
			t.Fatalf("commit %d: Watch signalled before the handle completed", i)
		}
	}
}

// TestBatchDeleteMarkersExpire: on a shared stream a delete marker leaves
// the stream and the index after tombstone_ttl, and a check on its key
// still decides right whether the index or the server forgot it first.
func TestBatchDeleteMarkersExpire(t *testing.T) {
	ctx := t.Context()
	d := openEngine(t, map[string]string{"commit": "batch", "tombstone_ttl": "1s"})
	for i := range 20 {
		k := []byte(fmt.Sprint("gone", i))
		if _, err := engine.Commit(ctx, d, new(engine.Batch).Put(k, []byte("x"))); err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Commit(ctx, d, new(engine.Batch).Delete(k)); err != nil {
			t.Fatal(err)
		}
	}
	// The index forgets a marker the server still holds: the check
	// fails on the server, the engine looks the key up and decides again.
	early := []byte("early")
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put(early, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Delete(early)); err != nil {
		t.Fatal(err)
	}
	d.view.settleKey(string(early), 0, false)
	if _, err := engine.Commit(ctx, d, new(engine.Batch).ExpectAbsent(early).Put(early, []byte("again"))); err != nil {
		t.Fatalf("ExpectAbsent on a key whose marker only the server held: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := d.st.Info(ctx, jetstream.WithSubjectFilter(d.dataPrefix+">"))
		if err != nil {
			t.Fatal(err)
		}
		if len(info.State.Subjects) == 1 { // "early", written again
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delete markers still in the stream after 10s: %v", info.State.Subjects)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The server forgot the markers; the index may still hold some. A
	// staging-like check on every key must pass, then hold.
	for i := range 20 {
		k := []byte(fmt.Sprint("gone", i))
		if _, err := engine.Commit(ctx, d, new(engine.Batch).ExpectAbsent(k).Put(k, []byte("again"))); err != nil {
			t.Fatalf("ExpectAbsent on %s after its delete marker expired: %v", k, err)
		}
		if _, err := engine.Commit(ctx, d, new(engine.Batch).ExpectAbsent(k).Put(k, []byte("twice"))); !errors.Is(err, engine.ErrConflict) {
			t.Fatalf("second ExpectAbsent on %s: %v, want ErrConflict", k, err)
		}
	}
	// The markers left the index too.
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte("tick"), nil)); err != nil {
		t.Fatal(err)
	}
	for k, v := range indexRecords(t, d) {
		if v.deleted {
			t.Fatalf("the index still holds the delete marker of %q", k)
		}
	}
}

// TestWALLostAnswerLookup: the lookup a committer makes when a
// transaction's answer is lost finds the stream's last transaction by its
// id, and no other.
func TestWALLostAnswerLookup(t *testing.T) {
	ctx := t.Context()
	d := openWALAt(t, t.TempDir())
	defer d.Close()
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte("a"), []byte("b")).Append([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Commit(ctx, d, new(engine.Batch).Put([]byte("c"), []byte("d"))); err != nil {
		t.Fatal(err)
	}
	last, err := d.st.GetLastMsgForSubject(ctx, d.txStateSubj)
	if err != nil {
		t.Fatal(err)
	}
	if seq, ok, err := d.lookupTx(last.Header.Get(hdrEnd)); err != nil || !ok || seq != last.Sequence {
		t.Fatalf("lookup of the last transaction = %d, %v, %v; want %d", seq, ok, err, last.Sequence)
	}
	first, err := d.st.GetLastMsgForSubject(ctx, d.txLogSubj)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := d.lookupTx(first.Header.Get(hdrEnd)); err != nil || ok {
		t.Fatalf("lookup of an earlier transaction = %v, %v; want not the last", ok, err)
	}
}

// TestWALRecentLog scans the log from every position while it grows past
// what the engine keeps in memory, with truncations and a reopen: the
// scans answered from memory and those that must read the stream (below
// what is kept, or after the reopen) return the same entries as a model.
func TestWALRecentLog(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	d := openWALAt(t, dir)
	d.recent.maxEntries = 40
	rng := rand.New(rand.NewPCG(3, 5))
	var logs []string
	var keys []engine.LogKey
	var floor engine.LogKey
	check := func(when string, wantMemory bool) {
		t.Helper()
		for i := -1; i < len(keys); i++ {
			from, exclusive := floor, false
			if i >= 0 {
				if keys[i] < floor {
					continue
				}
				from, exclusive = keys[i], rng.IntN(2) == 0
			}
			var want []string
			for j, k := range keys {
				if k >= floor && (k > from || (k == from && !exclusive)) {
					want = append(want, logs[j])
				}
			}
			var got []string
			if err := d.ScanLog(ctx, from, exclusive, func(e engine.Entry) bool {
				got = append(got, string(e.Value))
				return true
			}); err != nil {
				t.Fatalf("%s: scan from %d: %v", when, from, err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: scan from %d (exclusive %v) = %v, want %v", when, from, exclusive, got, want)
			}
		}
		if len(keys) > 0 {
			applied, _ := d.view.state()
			if _, ok := d.recent.scan(uint64(keys[len(keys)-1]), applied); ok != wantMemory {
				t.Fatalf("%s: the newest entry answered from memory: %v, want %v", when, ok, wantMemory)
			}
		}
	}
	for round := range 8 {
		var hs []*engine.Handle
		for j := range 5 + rng.IntN(10) {
			b := new(engine.Batch).Put([]byte(fmt.Sprintf("k%d", j)), []byte("v"))
			for n := range rng.IntN(4) {
				e := fmt.Sprintf("e%d.%d.%d", round, j, n)
				b.Append([]byte(e))
				logs = append(logs, e)
			}
			h, err := d.Submit(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		for _, h := range hs {
			res, err := h.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, res.Keys...)
		}
		check(fmt.Sprintf("round %d", round), true)
		if round%3 == 2 && len(keys) > 10 {
			floor = keys[len(keys)-10]
			if err := d.Truncate(ctx, floor); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("round %d, truncated below %d", round, floor), true)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openWALAt(t, dir)
	defer d.Close()
	check("after reopen", false)
}

// TestWALDefersWithoutSync submits a deferred commit, then a plain one,
// on an engine that never syncs: one transaction message carries both,
// since each message costs a round trip through the server, sync or not.
func TestWALDefersWithoutSync(t *testing.T) {
	e, err := open(t.Context(), engine.Options{Dir: t.TempDir(), Sync: engine.SyncNone, DeferWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	d := e.(*db)
	defer d.Close()
	put := func(key string, deferred bool) *engine.Handle {
		b := new(engine.Batch)
		b.Put([]byte(key), []byte("v"))
		b.Defer = deferred
		h, err := d.Submit(t.Context(), b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// A plain commit first: the gate defers only right after one.
	if _, err := put("a", false).Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := d.commitSeq.Load()
	deferred := put("b", true)
	select {
	case <-deferred.Done():
		t.Fatal("a deferred commit went alone")
	case <-time.After(20 * time.Millisecond):
	}
	if _, err := put("c", false).Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := deferred.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := d.commitSeq.Load() - before; n != 1 {
		t.Fatalf("%d transaction messages for a deferred and a plain commit, want 1", n)
	}
}
