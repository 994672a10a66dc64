//go:build !nojetstream

package jetstream

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// hdrLogTotal, on a transaction message with log entries, counts the log
// entries the stream received up to and including that message; LogStats
// takes the difference between its first and last retained message.
const hdrLogTotal = "Tidemark-Log-Total"

// walGroupBytes bounds the payload of one transaction message gathered
// from several commits; a single larger commit still goes alone.
const walGroupBytes = 8 << 20

// committerWAL is the committer of the single-writer layout. It takes
// every queued commit (within walGroupBytes and maxTxEntries log
// entries), decides their checks on the index plus the writes of the
// commits before them in the group, publishes the survivors as one
// transaction message, applies it to the index and completes the handles
// in submission order. One message is atomic by itself, so the group
// costs the server one plain publish, whatever its size.
func (d *db) committerWAL() {
	defer close(d.committerDone)
	for {
		size, logs := 0, 0
		group := d.queue.Next(nil, func(first bool, p *pending) bool {
			if !first && (size+p.bytes > walGroupBytes || logs+len(p.b.Log) > maxTxEntries) {
				return false
			}
			size += p.bytes
			logs += len(p.b.Log)
			return true
		})
		if group == nil {
			return
		}
		d.commitTx(group)
	}
}

// commitTx settles every commit of group and completes their handles in
// order, then signals Watch if the group logged anything: a watcher never
// hears of a commit before its handle.
func (d *db) commitTx(group []*pending) {
	logged := d.settleTx(group)
	for _, p := range group {
		p.complete(p.res, p.err)
	}
	if logged {
		d.notifier.Notify()
	}
}

// settleTx settles every commit of group and reports whether a log entry
// was committed.
func (d *db) settleTx(group []*pending) bool {
	_, closed := d.view.state()
	if closed {
		for _, p := range group {
			settle(p, driver.Result{}, fmt.Errorf("jetstream: commit: %w", driver.ErrClosed))
		}
		return false
	}
	logged, err := d.resolveLost()
	if err != nil {
		for _, p := range group {
			settle(p, driver.Result{}, err)
		}
		return logged
	}
	tx := planTx(group, d.idx)
	if len(tx.writes) == 0 && len(tx.logs) == 0 {
		for _, p := range tx.commits {
			settle(p, driver.Result{}, nil)
		}
		return logged
	}
	if err := d.admit(tx.commits); err != nil {
		for _, p := range tx.commits {
			settle(p, driver.Result{}, err)
		}
		return logged
	}
	d.txBuf = encodeTx(d.txBuf[:0], tx.logs, tx.writes)
	id := d.engineID + "-" + strconv.FormatUint(d.commitSeq.Add(1), 36)
	m := &nats.Msg{Subject: d.txStateSubj, Header: nats.Header{}, Data: d.txBuf}
	m.Header.Set(hdrEnd, id)
	if len(tx.logs) > 0 {
		m.Subject = d.txLogSubj
		m.Header.Set(hdrLogTotal, strconv.FormatUint(d.logTotal+uint64(len(tx.logs)), 10))
	}
	seq, err := d.publishTx(m, id)
	if errors.Is(err, errOutcomeUnknown) {
		d.keepLost(id, tx)
	}
	if err == nil && seq > maxTxSequence {
		err = fmt.Errorf("jetstream: stream sequence %d is past the last one the log keys can carry", seq)
	}
	if err != nil {
		for _, p := range tx.commits {
			settle(p, driver.Result{}, err)
		}
		return logged
	}
	d.landTx(seq, tx.writes, tx.logs)
	for i, p := range tx.commits {
		keys := make([]driver.LogKey, len(p.b.Log))
		for j := range keys {
			keys[j] = txKey(seq, tx.logAt[i]+j)
		}
		settle(p, driver.Result{Keys: keys}, nil)
	}
	return logged || len(tx.logs) > 0
}

// landTx applies a transaction that landed at stream sequence seq: its
// log entries join the running total and the recent log, its writes the
// index.
func (d *db) landTx(seq uint64, ws []txWrite, logs [][]byte) {
	d.logTotal += uint64(len(logs))
	if len(logs) > 0 {
		// Before the index publishes seq: a scan that sees it applied
		// finds its entries here.
		d.recent.add(seq, logs)
	}
	d.applyTx(seq, ws, len(logs) > 0)
}

// applyTx applies a transaction at stream sequence seq to the index and
// publishes it, and marks its keys for materializing. The index copies
// the values, which may belong to a caller.
func (d *db) applyTx(seq uint64, ws []txWrite, hasLog bool) {
	v := &d.view
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, w := range ws {
		v.dirty = append(v.dirty, w.key)
		if w.deleted {
			// Nothing needs a deleted key's sequence here (checks are
			// decided locally), so it leaves the index altogether.
			v.del(w.key)
			continue
		}
		v.put(w.key, version{seq: seq, val: w.val})
	}
	v.workSeq = seq
	if hasLog {
		v.workLogTop = seq
	}
	v.workLog = false // the committer signals Watch itself
	v.publishLocked()
	if len(v.dirty) >= matKick {
		select {
		case v.matKick <- struct{}{}:
		default:
		}
	}
}

// txPlan is one transaction message: the last write of each key the
// group's surviving commits write, their log entries in submission
// order, and where each commit's entries start.
type txPlan struct {
	writes  []txWrite
	logs    [][]byte
	commits []*pending
	logAt   []int
}

// planTx decides each commit's checks against the index plus the writes
// of the commits before it in the group; a commit whose check fails is settled
// with ErrConflict and left out. Checks decided here are final: this
// engine is the stream's only writer and publishes one transaction at a
// time, so the index it decides on is the stream's state.
func planTx(group []*pending, idx *store) txPlan {
	var tx txPlan
	at := map[string]int{} // key -> position in tx.writes
	for _, p := range group {
		if err := checkTx(p.b.Checks, idx, at, tx.writes); err != nil {
			settle(p, driver.Result{}, err)
			continue
		}
		for _, op := range p.b.Ops {
			w := txWrite{key: string(op.Key), val: op.Value, deleted: op.Kind == driver.OpDelete}
			if i, ok := at[w.key]; ok {
				tx.writes[i] = w
			} else {
				at[w.key] = len(tx.writes)
				tx.writes = append(tx.writes, w)
			}
		}
		tx.logAt = append(tx.logAt, len(tx.logs))
		tx.logs = append(tx.logs, p.b.Log...)
		tx.commits = append(tx.commits, p)
	}
	return tx
}

func checkTx(checks []driver.Check, idx *store, at map[string]int, ws []txWrite) error {
	for _, c := range checks {
		k := string(c.Key)
		var cur []byte
		var present bool
		if i, ok := at[k]; ok {
			cur, present = ws[i].val, !ws[i].deleted
		} else {
			v, found, err := idx.get(k)
			if err != nil {
				return fmt.Errorf("jetstream: commit: check %q: %w", c.Key, err)
			}
			cur, present = v.val, found && !v.deleted
		}
		if c.Absent == present || (!c.Absent && !bytes.Equal(cur, c.Value)) {
			what := "is absent"
			if present {
				what = "holds another value"
			}
			return fmt.Errorf("jetstream: %w: key %q %s", driver.ErrConflict, c.Key, what)
		}
	}
	return nil
}
