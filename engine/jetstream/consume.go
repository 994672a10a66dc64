//go:build !nojetstream

package jetstream

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/pebble/localkv"
)

// view is the engine's picture of the stream, built by the index consumer.
// Readers and the committer take the published fields under mu. The work
// fields, also under mu, are the index being built: the consumer's
// callback applies messages to them and publishes them only at batch
// boundaries so nobody sees part of a commit; the committer applies its
// own acknowledged groups to them the same way (applyOwn).
type view struct {
	mu       sync.Mutex
	idx      *store // the index; it holds what was published
	log      *slog.Logger
	applied  uint64        // highest stream sequence in the published index
	floor    uint64        // truncation floor
	floorSeq uint64        // sequence of the latest floor message
	logTop   uint64        // highest log entry sequence seen
	changed  chan struct{} // closed and replaced at each publish
	caught   chan struct{} // closed once the consumer reached the end of the stream on its server
	isCaught bool          // (see startConsumer for why that may not be the stream's end)
	closed   bool
	gen      uint64 // the generation of the consumer whose messages apply
	// delivered counts the messages of the current generation's
	// consumer, applied or skipped: the feed's measure of progress.
	delivered uint64
	// inflight is set while the committer awaits a batch of its own:
	// the committer then signals Watch itself, after completing the
	// handles, so a watcher never hears of a commit before its handle.
	inflight      bool
	pendingNotify bool

	// tombs lists the delete markers the index holds on a shared stream,
	// oldest first; each leaves the index tombTTL after it arrived, about
	// when the server expires it (see sweepLocked).
	tombs   []tomb
	tombTTL time.Duration

	// dirty lists the keys written since the materializer last took
	// them, repeats included (single-writer layout): an append is all the
	// committer pays, the materializer dedupes. matKick wakes it to do so
	// when the list is long.
	dirty   []string
	matKick chan struct{}

	batches    map[string]uint64 // recent batch id -> last sequence
	batchOrder []string

	// work holds the writes applied since the last publish, which
	// commits them to idx.
	work                    *localkv.Batch
	workSeq, workLogTop     uint64
	workFloor, workFloorSeq uint64
	workLog                 bool
}

func (v *view) init(idx *store, log *slog.Logger) {
	v.idx, v.log = idx, log
	v.work = idx.db.NewBatch()
	v.changed = make(chan struct{})
	v.caught = make(chan struct{})
	v.matKick = make(chan struct{}, 1)
}

// nextGen makes a new consumer generation current; messages of earlier
// ones are ignored from now on.
func (v *view) nextGen() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gen++
	// Caught up is the new consumer's to say.
	if v.isCaught {
		v.isCaught = false
		v.caught = make(chan struct{})
	}
	return v.gen
}

func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	close(v.changed)
	v.changed = make(chan struct{})
}

// progress returns how many messages consumers delivered so far, and
// whether the view closed.
func (v *view) progress() (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.delivered, v.closed
}

// state returns the highest stream sequence the published index holds,
// and whether the view closed.
func (v *view) state() (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.applied, v.closed
}

func (v *view) floorNow() (floor, floorSeq, logTop uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.floor, v.floorSeq, v.logTop
}

// raiseFloor records a floor this engine just persisted, before the
// consumer delivers its message.
func (v *view) raiseFloor(f uint64) {
	v.mu.Lock()
	v.floor = max(v.floor, f)
	v.mu.Unlock()
}

func (d *db) startConsumer(ctx context.Context) error {
	var info *jetstream.StreamInfo
	err := d.request(ctx, "stream info of "+d.name, attemptTimeout, func(ctx context.Context) error {
		var err error
		info, err = d.st.Info(ctx)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			// Created or found a moment ago: the server asked has not
			// seen it yet.
			return fmt.Errorf("%w: %w", errNotReady, err)
		}
		if err == nil && info.Cluster != nil && info.Cluster.Leader == "" {
			// A new replicated stream takes commits once its replicas
			// elected a leader.
			return fmt.Errorf("%w: stream %s has no leader yet", errNotReady, d.name)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := d.startFeed(ctx); err != nil {
		return err
	}
	v := &d.view
	defer d.feed.loading.Store(false)
	if info.State.Msgs == 0 {
		return nil
	}
	d.log.Info("loading the index", "stream", d.name, "messages", info.State.Msgs, "last_seq", info.State.LastSeq)
	d.feed.placeOnLeader(ctx)
	start := time.Now()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	var asked time.Time // when the leader was last asked (see below)
	for {
		v.mu.Lock()
		applied, caught, ch := v.applied, v.isCaught, v.changed
		v.mu.Unlock()
		done := applied >= info.State.LastSeq
		// Asked at most once a second: while other nodes write, the
		// view changes at every batch, and the index soon passes the
		// last sequence anyway.
		if !done && caught && time.Since(asked) >= time.Second {
			asked = time.Now()
			// The consumer found nothing more on its server, short of
			// the stream's last sequence (which may be a message gone
			// since, such as an expired delete marker). Its server may
			// be a replica still catching up with the stream: then what
			// it has is not all there is. The leader says what is.
			ok, why, err := d.feed.placedCurrent(ctx, true)
			if err == nil && !ok {
				d.feed.replaceBehind(why)
				continue
			}
			last, found, lerr := d.feed.leaderLast(ctx)
			if done = err == nil && ok && lerr == nil && (!found || applied >= last); !done {
				// Left to the consumer, which brings it unless it is
				// stuck, and then the watchdog replaces it.
				d.log.Info("the index consumer found no more, the stream leader may have", "stream", d.name, "applied_seq", applied, "leader_last_seq", last, "err", errors.Join(err, lerr))
			}
		}
		if done {
			d.log.Info("index loaded", "stream", d.name, "took", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ch:
		case <-progress.C:
			d.log.Info("waiting for the index consumer", "stream", d.name, "applied_seq", applied, "last_seq", info.State.LastSeq)
			// A replica catching up delivers, slowly, as it goes: the
			// watchdog sees progress, and the load takes as long as the
			// replica's catch-up. Another server has it all now.
			if ok, why, err := d.feed.placedCurrent(ctx, false); err == nil && !ok {
				d.feed.replaceBehind(why)
			}
		case <-ctx.Done():
			return fmt.Errorf("jetstream: loading index: at sequence %d of %d after %v: %w", applied, info.State.LastSeq, time.Since(start).Round(time.Second), ctx.Err())
		}
	}
}

const consumerExpiry = 4 * time.Second

// recentBatches is how many of the latest batch ids the view remembers,
// so a committer that lost a batch's acknowledgement can tell whether the
// batch landed.
const recentBatches = 4096

// onMsg applies one stream message to the work index and publishes at the
// end of each commit batch, or when nothing more is pending.
func (d *db) onMsg(gen uint64, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		d.log.Error("index consumer: message without metadata", "err", err)
		return
	}
	v := &d.view
	seq := md.Sequence.Stream
	v.mu.Lock()
	if v.closed || gen != v.gen {
		// The engine closed (the index is gone or going), or this
		// consumer was replaced (see feed).
		v.mu.Unlock()
		return
	}
	v.delivered++
	if seq <= v.workSeq {
		// Applied already: a group of this engine's own (applyOwn).
		if md.NumPending == 0 {
			v.markCaughtLocked()
		}
		v.mu.Unlock()
		return
	}
	h := m.Headers()
	d.applyMsgLocked(seq, m.Subject(), h, m.Data())
	// A batch's id is the server's batch header; a commit published as
	// one plain message carries its id in hdrEnd instead ("1" on a batch).
	batchID := h.Get(jetstreamext.BatchIDHeader)
	endVal := h.Get(hdrEnd)
	end := endVal != ""
	if batchID == "" && end && endVal != "1" {
		batchID = endVal
	}
	if !end && batchID != "" && md.NumPending > 0 {
		v.mu.Unlock()
		return
	}
	if end && batchID != "" {
		v.rememberBatch(batchID, seq)
	}
	notify := v.publishLocked()
	if md.NumPending == 0 {
		v.markCaughtLocked()
	}
	v.mu.Unlock()
	if notify {
		d.notifier.Notify()
	}
}

// applyMsgLocked applies one stream message to the work index. v.mu held.
func (d *db) applyMsgLocked(seq uint64, subj string, h nats.Header, data []byte) {
	v := &d.view
	switch {
	case strings.HasPrefix(subj, d.dataPrefix):
		key, err := hex.DecodeString(subj[len(d.dataPrefix):])
		if err != nil || len(key) == 0 {
			d.log.Error("index consumer: undecodable data subject", "subject", subj, "seq", seq)
			break
		}
		deleted := h.Get(hdrOp) == "del"
		if d.wal {
			// Loading a single-writer stream: what a key's subject holds
			// is what the materializer finds there.
			if deleted {
				v.del(string(key))
				v.work.Delete(presentKey(string(key)))
				break
			}
			v.work.Set(presentKey(string(key)), nil)
		}
		v.put(string(key), version{seq: seq, val: data, deleted: deleted})
		if deleted {
			v.tombs = append(v.tombs, tomb{key: string(key), seq: seq, at: time.Now()})
		}
	case subj == d.logSubj:
		v.workLog = true
		v.workLogTop = seq
	case subj == d.floorSubj:
		f, err := strconv.ParseUint(string(data), 10, 64)
		if err != nil {
			d.log.Error("index consumer: undecodable truncation floor", "seq", seq, "err", err)
			break
		}
		v.workFloor = max(v.workFloor, f)
		v.workFloorSeq = seq
	}
	v.workSeq = seq
}

// publishLocked makes the work index the one readers see and reports
// whether Watch should signal now. v.mu held.
func (v *view) publishLocked() (notify bool) {
	v.commitLocked()
	v.sweepLocked()
	v.applied = v.workSeq
	v.floor = max(v.floor, v.workFloor)
	v.floorSeq = max(v.floorSeq, v.workFloorSeq)
	v.logTop = max(v.logTop, v.workLogTop)
	notify = v.workLog && !v.inflight
	if v.workLog && v.inflight {
		v.pendingNotify = true
	}
	v.workLog = false
	close(v.changed)
	v.changed = make(chan struct{})
	return notify
}

// tomb is a delete marker in the index.
type tomb struct {
	key string
	seq uint64
	at  time.Time
}

// put and del write one record to the work batch; the index copies the
// value, so it may belong to a caller. v.mu held. A batch set or delete
// fails only on a closed batch, which the view never holds.
func (v *view) put(key string, ver version) {
	v.work.Set(recordKey(key), encodeVersion(ver))
}

func (v *view) del(key string) {
	v.work.Delete(recordKey(key))
}

// commitLocked commits the work batch to the index, where readers see it
// whole. The index is local and rebuilt at every open: a failure here
// (a full disk) leaves it behind the stream, so it is logged loudly. v.mu
// held.
func (v *view) commitLocked() {
	if v.work.Empty() {
		return
	}
	if err := v.work.Commit(); err != nil {
		v.log.Error("index: applying a batch failed; reads on this node may miss it until a restart", "seq", v.workSeq, "err", err)
	}
	v.work.Close()
	v.work = v.idx.db.NewBatch()
}

// sweepLocked drops from the index the delete markers older than tombTTL,
// which the server has expired (or is about to) without a message the
// consumer could see. If the index and the stream disagree on a marker for
// a while, a check on its key fails on the server and refreshChecked
// settles it. v.mu held, right after a commit.
func (v *view) sweepLocked() {
	if len(v.tombs) == 0 || time.Since(v.tombs[0].at) < v.tombTTL {
		return
	}
	n := 0
	for _, t := range v.tombs {
		if time.Since(t.at) < v.tombTTL {
			break
		}
		n++
		cur, ok, err := v.idx.get(t.key)
		if err != nil {
			v.log.Warn("index: sweeping a delete marker", "err", err)
			continue
		}
		if ok && cur.deleted && cur.seq == t.seq {
			v.del(t.key)
		}
	}
	// Reslicing is O(1); the next growth copies only the live part.
	v.tombs = v.tombs[n:]
	v.commitLocked()
}

// settleKey makes the index say what the stream holds for key, as found
// by a direct get after a failed check: nothing (found false) or a delete
// marker at seq. It does nothing while a batch is half applied, or when
// the stream moved past what the index applied (the consumer brings that).
func (v *view) settleKey(key string, seq uint64, found bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.workSeq != v.applied || seq > v.applied {
		return
	}
	if found {
		v.put(key, version{seq: seq, deleted: true})
		v.tombs = append(v.tombs, tomb{key: key, seq: seq, at: time.Now()})
	} else {
		v.del(key)
	}
	v.commitLocked()
}

func (v *view) markCaughtLocked() {
	if !v.isCaught {
		v.isCaught = true
		close(v.caught)
	}
}

// applyOwn applies a group this engine published, which the stream
// acknowledged at sequences first to first+len(msgs)-1, straight to the
// index, and reports whether it could: only when the index stands right
// before the group (so it stays a prefix of the stream). The consumer
// then skips those messages when they arrive. It saves the committer waiting for the consumer to bring its
// own writes back before it completes their handles.
func (d *db) applyOwn(first uint64, msgs []*nats.Msg, id string) bool {
	v := &d.view
	v.mu.Lock()
	defer v.mu.Unlock()
	last := first + uint64(len(msgs)) - 1
	if v.closed || first == 0 || v.applied != first-1 || v.workSeq > last {
		return false
	}
	// The consumer may have started on the group: its work index then
	// holds a prefix of it, and the rest goes on top.
	for i, m := range msgs {
		if seq := first + uint64(i); seq > v.workSeq {
			// The index copies the values: the caller may reuse the
			// batch's slices once its handle completed.
			d.applyMsgLocked(seq, m.Subject, m.Header, m.Data)
		}
	}
	if id != "" {
		v.rememberBatch(id, v.workSeq)
	}
	v.publishLocked() // the committer is in flight: it signals Watch itself
	return true
}

// waitApplied blocks until the index includes stream sequence seq.
func (d *db) waitApplied(ctx context.Context, seq uint64) error {
	v := &d.view
	for {
		v.mu.Lock()
		ok, closed, ch := v.applied >= seq, v.closed, v.changed
		v.mu.Unlock()
		if ok {
			return nil
		}
		if closed {
			return driver.ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// catchUp waits until the index includes everything the stream held when
// it was called.
func (d *db) catchUp(ctx context.Context) error {
	// A request in flight to a server that just failed is never answered;
	// callers retry, so give up early.
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	info, err := d.st.Info(ictx)
	cancel()
	if err != nil {
		return fmt.Errorf("jetstream: stream info: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return d.waitApplied(wctx, info.State.LastSeq)
}

// beginInflight and endInflight bracket a batch of the committer's own.
func (v *view) beginInflight() {
	v.mu.Lock()
	v.inflight = true
	v.mu.Unlock()
}

func (v *view) endInflight() (notify bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.inflight = false
	notify = v.pendingNotify
	v.pendingNotify = false
	return notify
}

func (v *view) rememberBatch(id string, seq uint64) {
	if v.batches == nil {
		v.batches = make(map[string]uint64, recentBatches)
	}
	v.batches[id] = seq
	v.batchOrder = append(v.batchOrder, id)
	if len(v.batchOrder) > recentBatches {
		delete(v.batches, v.batchOrder[0])
		v.batchOrder = v.batchOrder[1:]
	}
}

// batchApplied returns the last sequence of batch id if the index has
// applied it.
func (v *view) batchApplied(id string) (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	seq, ok := v.batches[id]
	return seq, ok
}

func (v *view) isClosed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed
}
