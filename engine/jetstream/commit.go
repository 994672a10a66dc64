//go:build !nojetstream

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/group"
)

// JetStream API error codes the committer acts on.
const (
	errCodeWrongLastSeq         = 10071 // an expected last subject sequence did not hold
	errCodeWrongLastSeqConstant = 10164 // the subject was busy in another batch
	errCodeBatchIncomplete      = 10176
	errCodeBatchTooLarge        = 10199
	errCodeTooManyInflight      = 10210
)

// msgOverhead bounds the subject and headers of one message.
const msgOverhead = 2048

// pending is one submitted commit.
type pending struct {
	b        *driver.Batch
	complete func(driver.Result, error)
	msgs     int // most messages the commit can need
	bytes    int
	res      driver.Result
	err      error
	done     bool
	deferred bool // driver.Batch.Defer, and the gate let it wait
}

func (d *db) Submit(ctx context.Context, b *driver.Batch) (*driver.Handle, error) {
	size := 0
	for i := range b.Ops {
		if n := len(b.Ops[i].Value) + msgOverhead; n > d.maxMessage {
			return nil, fmt.Errorf("jetstream: submit: op %d: %w: the server takes messages of %d bytes", i, driver.ErrValueTooLarge, d.maxMessage)
		}
		size += len(b.Ops[i].Value) + msgOverhead
	}
	for i, e := range b.Log {
		if n := len(e) + msgOverhead; n > d.maxMessage {
			return nil, fmt.Errorf("jetstream: submit: log entry %d: %w: the server takes messages of %d bytes", i, driver.ErrValueTooLarge, d.maxMessage)
		}
		size += len(e) + msgOverhead
	}
	if d.wal {
		size = txSize(b)
		if size+msgOverhead > d.maxMessage {
			return nil, fmt.Errorf("jetstream: submit: %w: %d bytes encoded, the server takes messages of %d bytes", driver.ErrBatchTooLarge, size, d.maxMessage)
		}
	}
	p := &pending{b: b, msgs: b.Len(), bytes: size}
	if d.wal {
		p.deferred = d.gate.Defer(b)
	}
	h, complete := driver.NewHandle()
	p.complete = complete
	// The queue has no bound: a commit waits for its group, never for room.
	if err := d.queue.Put(ctx, p); err != nil {
		return nil, fmt.Errorf("jetstream: submit: %w", err)
	}
	return h, nil
}

// maxGroupBytes bounds the payload of one gathered batch; a single larger
// commit still goes alone.
const maxGroupBytes = 48 << 20

// newQueue returns the committer's queue. Under the batch protocol the
// committer gathers a group's follow-ups before it publishes the next
// batch (batchRule); under the single-writer protocol a group of deferred
// commits waits for one that is not (the gate's window), and nothing else.
func (d *db) newQueue() *group.Queue[*pending] {
	if d.wal {
		return group.New(group.Options[*pending]{
			Linger:   d.gate.Window(),
			Deferred: func(p *pending) bool { return p.deferred },
		})
	}
	return group.New(group.Options[*pending]{Rule: batchRule})
}

// committer is the only publisher of commits: it takes every queued commit
// that fits one atomic batch, publishes it, and completes the handles in
// submission order before it takes the next group, so log keys follow
// submission order even when a group must be retried.
func (d *db) committer() {
	defer close(d.committerDone)
	for {
		msgs, size := 0, 0
		group := d.queue.Next(nil, func(first bool, p *pending) bool {
			if !first && (msgs+p.msgs > d.maxBatch || size+p.bytes > maxGroupBytes) {
				return false
			}
			msgs += p.msgs
			size += p.bytes
			return true
		})
		if group == nil {
			return
		}
		start := time.Now()
		d.commitGroup(group)
		d.queue.Done(len(group), time.Since(start))
	}
}

// Gathering (batchRule): from gatherMin commits in a group, the
// committer waits for their follow-ups a quarter of the time the group
// took, within [minGather, maxGather].
const (
	gatherMin = 4
	minGather = 200 * time.Microsecond
	maxGather = 3 * time.Millisecond
)

// batchRule is the batch protocol's gather rule: after a group of n
// commits completed, the next batch waits, from that completion, until n
// commits are queued again or its window passed. The callers of a group's
// commits tend to follow up at once (a broker answers a PUBREC with the
// release and a PUBCOMP with the client's next message, many clients each
// wait for their commit before the next), and every batch costs the
// server a fixed price whatever its size (on an R1 file stream a new
// staging file store and three fsyncs), so one batch a little later beats
// a small batch now and the rest in the next one.
var batchRule = group.Rule{
	Wait: func(last int, took time.Duration) time.Duration {
		if last < gatherMin {
			return 0
		}
		return min(max(took/4, minGather), maxGather)
	},
	FromDone: true,
}

// commitGroup publishes group as one atomic batch (or several, when the
// server's batch limit turns out lower; or as plain publishes, when every
// commit is one message without checks) and completes every handle.
func (d *db) commitGroup(group []*pending) {
	d.view.beginInflight()
	if len(group) > 1 && allSolo(group) {
		d.publishSolos(group)
	} else {
		d.publishGroup(group, 0)
	}
	for _, p := range group {
		if p.err != nil {
			p.complete(driver.Result{}, p.err)
		} else {
			p.complete(p.res, nil)
		}
	}
	if d.view.endInflight() {
		d.notifier.Notify()
	}
}

// publishGroup settles every commit of group: it sets res or err on each.
// attempt counts server-side conflicts the local index did not predict.
func (d *db) publishGroup(group []*pending, attempt int) {
	live := group[:0:0]
	for _, p := range group {
		if !p.done {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	if total := sumMsgs(live); total > d.maxBatch {
		if len(live) == 1 {
			settle(live[0], driver.Result{}, fmt.Errorf("jetstream: commit: %w: %d messages, the server takes %d per atomic batch", driver.ErrBatchTooLarge, total, d.maxBatch))
			return
		}
		half := len(live) / 2
		d.publishGroup(live[:half], 0)
		d.publishGroup(live[half:], 0)
		return
	}
	_, closed := d.view.state()
	if closed {
		for _, p := range live {
			settle(p, driver.Result{}, fmt.Errorf("jetstream: commit: %w", driver.ErrClosed))
		}
		return
	}
	pl := d.plan(live)
	if len(pl.msgs) == 0 {
		for _, p := range pl.commits {
			settle(p, driver.Result{}, nil)
		}
		return
	}
	if err := d.admit(pl.commits); err != nil {
		for _, p := range pl.commits {
			settle(p, driver.Result{}, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, publishTimeout)
	d.inflightMu.Lock()
	d.inflightCancel = pcancel
	d.inflightMu.Unlock()
	last, id, err := d.publish(pctx, pl.msgs)
	d.inflightMu.Lock()
	d.inflightCancel = nil
	d.inflightMu.Unlock()
	pcancel()
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			d.publishFailed(ctx, live, pl, attempt, err)
			return
		}
		if errors.Is(err, nats.ErrNoResponders) && attempt < 5 {
			// Nobody took the batch (a stream electing its leader): it
			// did not land, so it goes again.
			d.log.Info("no stream leader took the batch; sending it again", "stream", d.name, "attempt", attempt+1)
			time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
			d.publishGroup(live, attempt+1)
			return
		}
		if serr := d.storeErr(); serr != nil {
			// The embedded server's store failed a write and answers
			// nothing more, lookups included (see walcommit.go).
			for _, p := range pl.commits {
				settle(p, driver.Result{}, fmt.Errorf("jetstream: publish batch: no acknowledgement (%w): %w", err, serr))
			}
			return
		}
		// No answer (a timeout, a lost connection, a failover): the batch
		// may have landed. The index tells, once it caught up.
		seq, landed := d.batchLanded(ctx, id)
		if !landed {
			for _, p := range pl.commits {
				settle(p, driver.Result{}, fmt.Errorf("jetstream: publish batch: no acknowledgement, and the batch was not in the stream after catching up: %w", err))
			}
			return
		}
		last = seq
	}
	first := last - uint64(len(pl.msgs)) + 1
	if !d.applyOwn(first, pl.msgs, id) {
		if err := d.waitApplied(ctx, last); err != nil {
			// The batch is durable; only this node's index lags. Say so
			// and complete: the consumer applies it when it can.
			d.log.Warn("committed batch not yet in the local index", "seq", last, "err", err)
		}
	}
	for i, p := range pl.commits {
		keys := make([]driver.LogKey, len(p.b.Log))
		for j := range keys {
			keys[j] = driver.LogKey(first + uint64(pl.logAt[i]+j))
		}
		settle(p, driver.Result{Keys: keys}, nil)
	}
}

// publish publishes a plan's messages and returns the stream sequence of
// the last one, and the id that finds them in the stream if the answer is
// lost. One message needs no batch: a plain publish is atomic by itself,
// checks its expected sequence the same way, and spares the server the
// staging an atomic batch costs (on an R1 file stream a new file store
// and three fsyncs per batch, whatever its size). It carries its id in
// hdrEnd; a batch carries the batch id the server keeps on every message.
func (d *db) publish(ctx context.Context, msgs []*nats.Msg) (last uint64, id string, err error) {
	if len(msgs) == 1 {
		id = d.engineID + "-" + strconv.FormatUint(d.commitSeq.Add(1), 36)
		msgs[0].Header.Set(hdrEnd, id)
		ack, err := d.js.PublishMsg(ctx, msgs[0])
		if err != nil {
			return 0, id, err
		}
		return ack.Sequence, id, nil
	}
	ack, err := jetstreamext.PublishMsgBatch(ctx, d.js, msgs, jetstreamext.BatchFlowControl{AckFirst: false})
	id = msgs[0].Header.Get(jetstreamext.BatchIDHeader)
	switch {
	case err != nil:
		return 0, id, err
	case ack.BatchSize != uint64(len(msgs)):
		return 0, id, fmt.Errorf("jetstream: batch acknowledged %d messages of %d", ack.BatchSize, len(msgs))
	}
	return ack.Sequence, id, nil
}

// solo reports whether p is one message without checks: a plain publish
// carries it atomically, and nothing it does depends on another commit.
func solo(p *pending) bool {
	return len(p.b.Checks) == 0 && len(p.b.Ops)+len(p.b.Log) == 1
}

func allSolo(group []*pending) bool {
	for _, p := range group {
		if !solo(p) {
			return false
		}
	}
	return true
}

// publishSolos commits a group of solo commits as plain publishes, all
// sent before the first answer is awaited, rather than as one atomic
// batch: each is atomic by itself and none checks anything, so none
// needs the others', and the server spares a batch's staging. The stream
// applies them in the order sent, so log keys follow submission order.
// One the server rejects fails on its own (it has no check, so the
// rejection is not a conflict to decide again); one whose answer is lost
// is looked up by its id, as a batch is. Handles complete in order as the
// answers arrive.
func (d *db) publishSolos(group []*pending) {
	_, closed := d.view.state()
	if closed {
		for _, p := range group {
			settle(p, driver.Result{}, fmt.Errorf("jetstream: commit: %w", driver.ErrClosed))
		}
		return
	}
	if err := d.admit(group); err != nil {
		for _, p := range group {
			settle(p, driver.Result{}, err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, publishTimeout)
	defer pcancel()
	d.inflightMu.Lock()
	d.inflightCancel = pcancel
	d.inflightMu.Unlock()
	defer func() {
		d.inflightMu.Lock()
		d.inflightCancel = nil
		d.inflightMu.Unlock()
	}()
	type sent struct {
		pl  plan
		id  string
		fut jetstream.PubAckFuture
		err error
	}
	out := make([]sent, len(group))
	for i, p := range group {
		pl := d.plan([]*pending{p})
		id := d.engineID + "-" + strconv.FormatUint(d.commitSeq.Add(1), 36)
		pl.msgs[0].Header.Set(hdrEnd, id)
		fut, err := d.js.PublishMsgAsync(pl.msgs[0])
		out[i] = sent{pl: pl, id: id, fut: fut, err: err}
	}
	for i, p := range group {
		o := &out[i]
		var seq uint64
		err := o.err
		if err == nil {
			select {
			case ack := <-o.fut.Ok():
				seq = ack.Sequence
			case err = <-o.fut.Err():
			case <-pctx.Done():
				err = fmt.Errorf("jetstream: publish: no acknowledgement: %w", pctx.Err())
			}
		}
		if err != nil {
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) {
				settle(p, driver.Result{}, d.storageRefused(fmt.Errorf("jetstream: publish: %w", err)))
				p.complete(p.res, p.err)
				continue
			}
			if serr := d.storeErr(); serr != nil {
				settle(p, driver.Result{}, fmt.Errorf("jetstream: publish: no acknowledgement (%w): %w", err, serr))
				p.complete(p.res, p.err)
				continue
			}
			landed, ok := d.batchLanded(ctx, o.id)
			if !ok {
				settle(p, driver.Result{}, fmt.Errorf("jetstream: publish: no acknowledgement, and the commit was not in the stream after catching up: %w", err))
				p.complete(p.res, p.err)
				continue
			}
			seq = landed
		}
		if !d.applyOwn(seq, o.pl.msgs, o.id) {
			if err := d.waitApplied(ctx, seq); err != nil {
				d.log.Warn("committed message not yet in the local index", "seq", seq, "err", err)
			}
		}
		keys := make([]driver.LogKey, len(p.b.Log))
		if len(keys) == 1 {
			keys[0] = driver.LogKey(seq)
		}
		settle(p, driver.Result{Keys: keys}, nil)
		p.complete(p.res, nil)
	}
}

// publishTimeout bounds the wait for one batch's acknowledgement; a
// failover usually settles well within it.
const publishTimeout = 10 * time.Second

// batchLanded catches up with the stream and reports whether batch id is
// in it, with its last sequence.
func (d *db) batchLanded(ctx context.Context, id string) (uint64, bool) {
	if id == "" {
		return 0, false
	}
	for ctx.Err() == nil && !d.view.isClosed() {
		if err := d.catchUp(ctx); err == nil {
			return d.view.batchApplied(id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d.view.batchApplied(id)
}

// publishFailed handles a batch the server rejected: nothing of it applied.
func (d *db) publishFailed(ctx context.Context, live []*pending, pl plan, attempt int, err error) {
	var apiErr *jetstream.APIError
	errors.As(err, &apiErr)
	switch apiErr.ErrorCode {
	case errCodeWrongLastSeq, errCodeWrongLastSeqConstant:
		// Another node changed a checked key. Nothing applied: catch up
		// and decide again, so only commits whose checks fail now get
		// ErrConflict. After a few surprises, go one commit at a time so
		// the conflict is pinned on the commit that caused it.
		if err := d.catchUp(ctx); err != nil {
			d.log.Warn("catching up after a conflict", "err", err)
		}
		d.refreshChecked(ctx, live)
		if len(live) == 1 && attempt >= 3 {
			settle(live[0], driver.Result{}, fmt.Errorf("jetstream: commit: %w: %s", driver.ErrConflict, apiErr.Description))
			return
		}
		if attempt >= 3 {
			for _, p := range live {
				d.publishGroup([]*pending{p}, 0)
			}
			return
		}
		if apiErr.ErrorCode == errCodeWrongLastSeqConstant {
			time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
		}
		d.publishGroup(live, attempt+1)
	case errCodeBatchTooLarge:
		if limit := parseLimit(apiErr.Description); limit > 0 && limit < d.maxBatch {
			d.log.Info("server limits atomic batches", "messages", limit)
			d.maxBatch = limit
		} else if d.maxBatch > 1 {
			d.maxBatch /= 2
		}
		d.batchLimit.Store(int64(d.maxBatch))
		d.publishGroup(live, attempt)
	case errCodeTooManyInflight, errCodeBatchIncomplete:
		if attempt >= 5 {
			for _, p := range live {
				settle(p, driver.Result{}, fmt.Errorf("jetstream: publish batch: %w", err))
			}
			return
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
		d.publishGroup(live, attempt+1)
	default:
		err = d.storageRefused(fmt.Errorf("jetstream: publish batch: %w", err))
		for _, p := range live {
			settle(p, driver.Result{}, err)
		}
	}
}

// refreshChecked makes the index agree with the stream on the keys group
// checks that the index holds as deleted or absent: the server expires a
// delete marker without a message the consumer could bring, and the index
// may have swept one the server still holds, so the expected sequence the
// index gives such a key can be wrong without any other node writing it.
func (d *db) refreshChecked(ctx context.Context, group []*pending) {
	seen := map[string]bool{}
	for _, p := range group {
		for _, c := range p.b.Checks {
			k := string(c.Key)
			if seen[k] {
				continue
			}
			seen[k] = true
			if v, ok, err := d.idx.get(k); err != nil || (ok && !v.deleted) {
				continue
			}
			m, err := d.st.GetLastMsgForSubject(ctx, d.dataSubject(c.Key))
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				d.view.settleKey(k, 0, false)
			case err != nil:
				d.log.Debug("refreshing a checked key", "err", err)
			case m.Header.Get(hdrOp) == "del":
				d.view.settleKey(k, m.Sequence, true)
			}
		}
	}
}

var limitRE = regexp.MustCompile(`(\d+)\s*$`)

func parseLimit(desc string) int {
	m := limitRE.FindStringSubmatch(desc)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func settle(p *pending, res driver.Result, err error) {
	p.res, p.err, p.done = res, err, true
}

func sumMsgs(ps []*pending) int {
	n := 0
	for _, p := range ps {
		n += p.msgs
	}
	return n
}

// plan is one atomic batch: the data messages (the last write of each key,
// carrying the key's expected sequence when a commit checked it), carriers
// for expectations on keys nobody in the batch writes, then each commit's
// log entries in submission order.
type plan struct {
	msgs    []*nats.Msg
	commits []*pending // commits in the batch, in order
	logAt   []int      // index in msgs of each commit's first log entry
}

type overlayEntry struct {
	val     []byte
	deleted bool
}

// plan evaluates each commit's checks against the index plus the writes
// of the commits before it in the group; a commit whose check fails is settled
// with ErrConflict and left out. A check on a key an earlier commit of the
// group wrote needs no expectation: the batch is atomic, so that write is
// what the commit will see.
func (d *db) plan(group []*pending) plan {
	overlay := map[string]overlayEntry{}
	var written []string
	expect := map[string]uint64{}
	var expectOrder []string
	var pl plan
	for _, p := range group {
		var mine []string
		ok := true
		for _, c := range p.b.Checks {
			k := string(c.Key)
			var cur []byte
			present := false
			if ov, in := overlay[k]; in {
				cur, present = ov.val, !ov.deleted
			} else {
				v, found, err := d.idx.get(k)
				if err != nil {
					ok = false
					for _, k := range mine {
						delete(expect, k)
					}
					settle(p, driver.Result{}, fmt.Errorf("jetstream: commit: check %q: %w", c.Key, err))
					break
				}
				cur, present = v.val, found && !v.deleted
				if _, had := expect[k]; !had {
					expect[k] = v.seq
					mine = append(mine, k)
				}
			}
			if c.Absent == present || (!c.Absent && !bytes.Equal(cur, c.Value)) {
				what := "is absent"
				if present {
					what = "holds another value"
				}
				ok = false
				for _, k := range mine {
					delete(expect, k)
				}
				settle(p, driver.Result{}, fmt.Errorf("jetstream: %w: key %q %s", driver.ErrConflict, c.Key, what))
				break
			}
		}
		if !ok {
			continue
		}
		expectOrder = append(expectOrder, mine...)
		for _, op := range p.b.Ops {
			k := string(op.Key)
			if _, in := overlay[k]; !in {
				written = append(written, k)
			}
			overlay[k] = overlayEntry{val: op.Value, deleted: op.Kind == driver.OpDelete}
		}
		pl.commits = append(pl.commits, p)
	}
	for _, k := range written {
		ov := overlay[k]
		m := &nats.Msg{Subject: d.dataSubject([]byte(k)), Header: nats.Header{}}
		// The key's previous message goes: a subject holds its newest
		// write only, and a delete marker expires.
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if ov.deleted {
			m.Header.Set(hdrOp, "del")
			m.Header.Set(jetstream.MsgTTLHeader, d.tombTTLHeader())
		} else {
			m.Data = ov.val
		}
		if seq, ok := expect[k]; ok {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
			delete(expect, k)
		}
		pl.msgs = append(pl.msgs, m)
	}
	for _, k := range expectOrder {
		seq, ok := expect[k]
		if !ok {
			continue
		}
		m := &nats.Msg{Subject: d.checkSubj, Header: nats.Header{}}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(seq, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, d.dataSubject([]byte(k)))
		pl.msgs = append(pl.msgs, m)
	}
	for _, p := range pl.commits {
		pl.logAt = append(pl.logAt, len(pl.msgs))
		for _, e := range p.b.Log {
			pl.msgs = append(pl.msgs, &nats.Msg{Subject: d.logSubj, Header: nats.Header{}, Data: e})
		}
	}
	if n := len(pl.msgs); n > 0 {
		pl.msgs[n-1].Header.Set(hdrEnd, "1")
	}
	return pl
}
