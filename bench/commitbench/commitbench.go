// Package commitbench measures synced engine commits: the rate and
// completion latency of commit loads against one engine, beside a raw
// fdatasync loop on the same disk, for `tidemark bench commits` and the
// engines' Go benchmarks.
package commitbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/engine"
)

// CommitLoad is one point of the commit benchmark.
type CommitLoad struct {
	Submitters int // concurrent goroutines, each waiting for its own commit
	Writes     int // puts per commit, each with one log entry
	// Follower gives each submitter a second goroutine that, after each
	// of the submitter's commits, commits once of its own and waits for
	// it: a broker's subscriber side writing delivery state behind the
	// publisher's commits. Only the submitters' commits are counted.
	Follower Follower
}

// Follower says whether a commit load has followers, and how they commit.
type Follower uint8

const (
	NoFollower       Follower = iota
	FollowerPlain             // the followers' commits are like the submitters'
	FollowerDeferred          // the followers' commits are marked engine.Batch.Defer
)

func (f Follower) String() string {
	return [...]string{"none", "plain", "deferred"}[f]
}

// CommitLoads are the points the commit benchmark measures.
var CommitLoads = []CommitLoad{
	{Submitters: 1, Writes: 1}, {Submitters: 16, Writes: 1}, {Submitters: 64, Writes: 1},
	{Submitters: 1, Writes: 1000}, {Submitters: 16, Writes: 1000}, {Submitters: 64, Writes: 1000},
	{Submitters: 1, Writes: 1, Follower: FollowerPlain}, {Submitters: 1, Writes: 1, Follower: FollowerDeferred},
}

// CommitStats is what one commit-benchmark point measured.
type CommitStats struct {
	Commits  int
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// PerSecond is the commit rate.
func (s CommitStats) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Commits) / s.Elapsed.Seconds()
}

// RunCommits drives n synced commits of load at e from load.Submitters
// goroutines (each waits for its commit before the next, as a client would)
// and returns the rate and completion latencies. Values are 64 bytes.
func RunCommits(e engine.Engine, load CommitLoad, n int) (CommitStats, error) {
	val := make([]byte, 64)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	var next atomic.Int64
	lat := make([][]time.Duration, load.Submitters)
	errs := make(chan error, 2*load.Submitters)
	var wg, followers sync.WaitGroup
	start := time.Now()
	for s := 0; s < load.Submitters; s++ {
		var kick chan struct{}
		if load.Follower != NoFollower {
			kick = make(chan struct{}, 1)
			followers.Add(1)
			go func() {
				defer followers.Done()
				key := []byte(fmt.Sprintf("bench/%03d/follower", s))
				for range kick {
					b := new(engine.Batch).Put(key, val)
					b.Defer = load.Follower == FollowerDeferred
					if _, err := engine.Commit(context.Background(), e, b); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if kick != nil {
				defer close(kick)
			}
			keys := make([][]byte, load.Writes)
			for j := range keys {
				keys[j] = []byte(fmt.Sprintf("bench/%03d/%04d", s, j))
			}
			for next.Add(1) <= int64(n) {
				b := &engine.Batch{Ops: make([]engine.Op, 0, load.Writes), Log: make([][]byte, 0, load.Writes)}
				for _, k := range keys {
					b.Put(k, val).Append(val)
				}
				t0 := time.Now()
				if _, err := engine.Commit(context.Background(), e, b); err != nil {
					errs <- err
					return
				}
				lat[s] = append(lat[s], time.Since(t0))
				select {
				case kick <- struct{}{}:
				default: // the follower is still busy with the last one
				}
			}
		}()
	}
	wg.Wait()
	st := CommitStats{Elapsed: time.Since(start)}
	followers.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return st, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	st.Commits = len(all)
	if len(all) > 0 {
		st.P50 = all[len(all)/2]
		st.P99 = all[min(len(all)-1, len(all)*99/100)]
	}
	return st, nil
}

// FsyncRate measures a raw append-and-fdatasync loop of 64-byte records in
// dir for about d and returns syncs per second: the floor any synced engine
// is measured against on the same disk.
func FsyncRate(dir string, d time.Duration) (float64, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	return fsyncLoop(f, d)
}

// inPlaceProbeSize is the size the in-place probe's file starts at: more
// than its loop writes on any disk.
const inPlaceProbeSize = 64 << 20

// FsyncRateInPlace is FsyncRate with the records written one after the
// other into a file already as large as all of them (a sparse one), so no
// fdatasync has to record a new file size: the kind of write a log whose
// space is reserved within its file makes (Pebble's WAL, see
// engine/pebble). It is the faster of the two on most file systems.
func FsyncRateInPlace(dir string, d time.Duration) (float64, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync-probe-in-place"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	if err := f.Truncate(inPlaceProbeSize); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return 0, err
	}
	return fsyncLoop(f, d)
}

// fsyncLoop writes 64-byte records to f, each followed by an fdatasync,
// for about d, then closes and removes f.
func fsyncLoop(f *os.File, d time.Duration) (float64, error) {
	defer os.Remove(f.Name())
	defer f.Close()
	rec := make([]byte, 64)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := f.Write(rec); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}
