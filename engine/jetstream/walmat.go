//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/pebble/localkv"
)

// Materializing (single-writer layout): the latest value of every key the
// transactions wrote goes to the key's own subject, replacing the one
// before it (a rollup), so the stream keeps one message per live key plus
// the transactions not yet materialized and the retained log.
const (
	// matInterval is how often the materializer runs. Each run writes
	// the keys changed by the transactions of the interval before the
	// last one, so a key lives between one and two intervals before it is
	// written to its subject: one written and deleted sooner (most of a
	// broker's in-flight state: staged messages, delivery records,
	// completion marks until the next checkpoint) never is.
	matInterval = time.Second
	// matKick bounds the memory the changed-key sets take (and with it
	// the transactions an open replays): this many writes listed make the
	// materializer fold the list into a set of distinct keys, and this
	// many distinct keys start a run early. Counting distinct keys rather
	// than writes keeps a busy broker's runs a second apart: counted in
	// writes (a QoS 2 message makes several, mostly to the same few keys)
	// runs came early and wrote keys a few hundred milliseconds old, most
	// of which were deleted soon after (a delete marker each).
	matKick = 1 << 18
	// matWindow is how many key messages it has in flight at once.
	matWindow = 1024
	// matWindowSynced is matWindow when the server fsyncs every message
	// (SyncAlways): the server stores one connection's messages in order,
	// so a commit published behind a full window would wait for that
	// many fsyncs (about 300 ms of them at 1024).
	matWindowSynced = 16
)

// materializer writes changed keys to their subjects, then records the
// transaction sequence up to which every change is on its subject (the
// mark) and purges what the mark makes redundant: transaction messages
// without log entries below it, and those with log entries below both
// the mark and the truncation floor. It runs on one goroutine; its fields
// are its own. The keys changed since the last run are the young
// generation (view.dirty); a run takes them, writes the generation taken
// by the run before (old), whose transactions all lie at or below
// oldTop, and then moves the mark to oldTop.
type materializer struct {
	d    *db
	stop chan struct{}
	done chan struct{}
	// mu serializes runs; the fields below are the runs'.
	mu sync.Mutex
	// noFinal skips the run at close, leaving the stream as a crash
	// would (tests).
	noFinal bool
	// young holds the keys written since the last run that were folded
	// out of view.dirty before it (see collect).
	young   map[string]struct{}
	old     map[string]struct{}
	oldTop  uint64
	mark    uint64
	purgedT uint64 // transaction messages without log entries below this are purged
	purgedL uint64 // transaction messages with log entries below this are purged
}

func (m *materializer) run() {
	defer close(m.done)
	t := time.NewTicker(matInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			m.mu.Lock()
			skip := m.noFinal
			m.mu.Unlock()
			if skip {
				return
			}
			if err := m.flush(true); err != nil {
				m.d.log.Warn("materializing on close", "err", err)
			}
			return
		case <-m.d.view.matKick:
			m.mu.Lock()
			n := m.collect()
			m.mu.Unlock()
			if n < matKick {
				continue
			}
		case <-t.C:
		}
		if err := m.flush(false); err != nil {
			m.d.log.Warn("materializing keys", "err", err)
		}
	}
}

// flush takes the young generation and writes the old one, or with all
// both. On an error nothing is lost: the keys not written join the next
// generation and the mark stays where it was, so the transactions keep
// holding the changes until a later run succeeds.
func (m *materializer) flush(all bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.d
	// The young generation is complete up to top only when both are read
	// at once: its keys' transactions are purged once the mark passes top.
	written, snap, top := d.view.takeWritten()
	defer func() { _ = snap.Close() }()
	m.fold(written)
	young := m.young
	m.young = nil
	keys, upTo := m.old, m.oldTop
	m.old, m.oldTop = young, top
	if all {
		// A key of both generations is written once, with its newest value.
		keys = merge(keys, young)
		upTo, m.old = top, nil
	}
	if len(keys) == 0 && upTo <= m.mark {
		return m.purge()
	}
	if err := m.write(keys, snap); err != nil {
		m.old = merge(m.old, keys)
		return err
	}
	top = upTo
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	mk := &nats.Msg{Subject: d.markSubj, Header: nats.Header{}, Data: []byte(strconv.FormatUint(top, 10))}
	mk.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := d.js.PublishMsg(ctx, mk); err != nil {
		return fmt.Errorf("jetstream: record materialized mark: %w", err)
	}
	m.mark = top
	return m.purge()
}

// collect folds the keys listed in view.dirty into young and returns how
// many distinct keys young holds; m.mu held.
func (m *materializer) collect() int {
	return m.fold(m.d.view.takeDirty())
}

// fold adds written to young and returns how many distinct keys young
// holds; m.mu held.
func (m *materializer) fold(written []string) int {
	if m.young == nil {
		m.young = make(map[string]struct{}, len(written))
	}
	for _, k := range written {
		m.young[k] = struct{}{}
	}
	return len(m.young)
}

// takeWritten returns the keys written since the last call (repeats
// included), with a snapshot of the index and the applied sequence they
// are complete up to, all read at once. The caller closes the snapshot.
func (v *view) takeWritten() ([]string, *localkv.Snapshot, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.takeDirtyLocked(), v.idx.db.NewSnapshot(), v.applied
}

// takeDirty returns the keys written since the last call.
func (v *view) takeDirty() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.takeDirtyLocked()
}

func (v *view) takeDirtyLocked() []string {
	written := v.dirty
	if len(written) > 0 {
		v.dirty = make([]string, 0, cap(written))
	}
	return written
}

// write publishes the current value (or a delete marker) of every key in
// keys, matWindow at a time.
func (m *materializer) write(keys map[string]struct{}, snap *localkv.Snapshot) error {
	d := m.d
	type sent struct {
		key     string
		deleted bool
		fut     jetstream.PubAckFuture
	}
	window := matWindow
	if d.opts.Sync == driver.SyncAlways {
		window = matWindowSynced
	}
	batch := make([]sent, 0, min(len(keys), window))
	wait := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		defer cancel()
		var first error
		for _, s := range batch {
			select {
			case <-s.fut.Ok():
				if s.deleted {
					if err := d.idx.setPresent(s.key, false); err != nil {
						first = cmp(first, err)
					}
				}
			case err := <-s.fut.Err():
				first = cmp(first, err)
			case <-ctx.Done():
				first = cmp(first, ctx.Err())
			case <-d.storeDown():
				first = cmp(first, d.storeErr())
			}
		}
		batch = batch[:0]
		if first != nil {
			return fmt.Errorf("jetstream: materialize keys: %w", first)
		}
		return nil
	}
	for k := range keys {
		ver, ok, err := lookup(snap, k)
		if err != nil {
			_ = wait()
			return fmt.Errorf("jetstream: materialize key: %w", err)
		}
		deleted := !ok || ver.deleted
		if deleted {
			// A key deleted before it was ever materialized needs no
			// marker.
			present, err := d.idx.present(k)
			if err != nil {
				_ = wait()
				return fmt.Errorf("jetstream: materialize key: %w", err)
			}
			if !present {
				continue
			}
		}
		msg := &nats.Msg{Subject: d.dataSubject([]byte(k)), Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		if deleted {
			msg.Header.Set(hdrOp, "del")
			msg.Header.Set(jetstream.MsgTTLHeader, d.tombTTLHeader())
		} else {
			// Present before it is sent, not once acknowledged: a value
			// whose answer is lost (a dropped connection, a timeout) may
			// have landed, and a key whose subject might hold a value
			// must get a delete marker when deleted, or the next open
			// would find the value there once the delete's transaction
			// was purged.
			if err := d.idx.setPresent(k, true); err != nil {
				_ = wait()
				return fmt.Errorf("jetstream: materialize key: %w", err)
			}
			msg.Data = ver.val
		}
		fut, err := d.js.PublishMsgAsync(msg)
		if err != nil {
			_ = wait()
			return fmt.Errorf("jetstream: materialize key: %w", err)
		}
		batch = append(batch, sent{key: k, deleted: deleted, fut: fut})
		if len(batch) == window {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// merge adds b's keys to a and returns it.
func merge(a, b map[string]struct{}) map[string]struct{} {
	if a == nil {
		return b
	}
	for k := range b {
		a[k] = struct{}{}
	}
	return a
}

func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// purge removes the transaction messages the mark and the floor made
// redundant.
func (m *materializer) purge() error {
	d := m.d
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if below := m.mark + 1; below > m.purgedT {
		if err := d.st.Purge(ctx, jetstream.WithPurgeSubject(d.txStateSubj), jetstream.WithPurgeSequence(below)); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("jetstream: purge materialized transactions: %w", err)
		}
		m.purgedT = below
	}
	floor, _, _ := d.view.floorNow()
	if below := min(m.mark+1, floor>>logShift); below > m.purgedL {
		if err := d.st.Purge(ctx, jetstream.WithPurgeSubject(d.txLogSubj), jetstream.WithPurgeSequence(below)); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("jetstream: purge truncated log: %w", err)
		}
		m.purgedL = below
	}
	return nil
}
