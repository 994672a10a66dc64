//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// loadWAL builds the index of a single-writer stream: the last message of
// every key subject (the materialized state), the floor, then every
// transaction after the materialized mark, in stream order, on top. A key
// subject may already hold a value newer than some of those transactions
// (the materializer got further than its mark); replaying them in order
// still ends at the newest write of each key.
func (d *db) loadWAL(ctx context.Context) error {
	if err := d.startConsumer(ctx); err != nil {
		return err
	}
	// Nobody else writes: the consumer is done once it caught up. Delete
	// it rather than let it idle until the server expires it: the server
	// keeps its pending count up to date at every purge.
	d.feed.close(ctx, true)
	d.feed = nil
	d.mat = &materializer{d: d, stop: make(chan struct{}), done: make(chan struct{})}

	mark, err := d.lastNumber(ctx, d.markSubj)
	if err != nil {
		return fmt.Errorf("jetstream: read materialized mark: %w", err)
	}
	d.mat.mark = mark
	last, err := d.st.GetLastMsgForSubject(ctx, d.txLogSubj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("jetstream: read log total: %w", err)
	default:
		if d.logTotal, err = strconv.ParseUint(last.Header.Get(hdrLogTotal), 10, 64); err != nil {
			return fmt.Errorf("jetstream: read log total of message %d: %w", last.Sequence, err)
		}
	}
	for next := mark + 1; ; {
		page, after, more, err := d.getPage(ctx, d.txPrefix+">", next, ^uint64(0))
		if err != nil {
			return fmt.Errorf("jetstream: replay transactions: %w", err)
		}
		for _, m := range page {
			_, ws, err := decodeTx(m.Data)
			if err != nil {
				return fmt.Errorf("jetstream: replay transaction %d: %w", m.Sequence, err)
			}
			d.applyTx(m.Sequence, ws, m.Subject == d.txLogSubj)
		}
		if len(page) == 0 || !more {
			return nil
		}
		next = after
	}
}

// lastNumber returns the number in the last message of subj, 0 if none.
func (d *db) lastNumber(ctx context.Context, subj string) (uint64, error) {
	m, err := d.st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(m.Data), 10, 64)
}

// scanLogWAL reads the log entries of the transaction messages the index
// has applied.
func (d *db) scanLogWAL(ctx context.Context, start uint64, fn func(driver.Entry) bool) error {
	floor, _, _ := d.view.floorNow()
	if floor > 0 && start < floor {
		return fmt.Errorf("jetstream: scan log: %w: scan starts at %d, retained log starts at %d", driver.ErrLogTruncated, start, floor)
	}
	applied, _ := d.view.state()
	if page, ok := d.recent.scan(start, applied); ok {
		for _, e := range page {
			if !fn(e) {
				return nil
			}
		}
		return nil
	}
	seq := max(start>>logShift, 1)
	for seq <= applied {
		if d.isClosed() {
			return fmt.Errorf("jetstream: scan log: %w", driver.ErrClosed)
		}
		msgs, after, more, err := d.getPage(ctx, d.txLogSubj, seq, applied)
		if err != nil {
			return fmt.Errorf("jetstream: scan log: %w", err)
		}
		var page []driver.Entry
		for _, m := range msgs {
			logs, err := decodeTxLog(m.Data)
			if err != nil {
				return fmt.Errorf("jetstream: scan log: message %d: %w", m.Sequence, err)
			}
			for i, e := range logs {
				if k := txKey(m.Sequence, i); uint64(k) >= start {
					page = append(page, driver.Entry{Key: k, Count: 1, Value: e})
				}
			}
		}
		// fn runs after the page is read, so it may call back into the engine.
		for _, e := range page {
			if !fn(e) {
				return nil
			}
		}
		if len(msgs) == 0 || !more {
			return nil
		}
		seq = after
	}
	return nil
}

// truncateWAL persists the new floor; the materializer purges the
// transaction messages wholly below it once their writes are on their
// key subjects.
func (d *db) truncateWAL(ctx context.Context, below driver.LogKey) error {
	floor, _, _ := d.view.floorNow()
	applied, _ := d.view.state()
	// Keys past the next transaction do not exist yet; a floor above
	// them would hide entries not yet written.
	target := min(uint64(below), uint64(txKey(applied+1, 0)))
	if target <= floor {
		return nil
	}
	m := &nats.Msg{Subject: d.floorSubj, Header: nats.Header{}, Data: []byte(strconv.FormatUint(target, 10))}
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if _, err := d.js.PublishMsg(rctx, m); err != nil {
		return fmt.Errorf("jetstream: truncate: persist floor: %w", err)
	}
	d.view.raiseFloor(target)
	return nil
}

// logStatsWAL counts retained entries from the running totals on the first
// and last retained transaction messages.
func (d *db) logStatsWAL(ctx context.Context) (driver.LogStats, error) {
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	floor, _, _ := d.view.floorNow()
	st := driver.LogStats{Floor: driver.LogKey(floor)}
	last, err := d.st.GetLastMsgForSubject(rctx, d.txLogSubj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: last entry: %w", err)
	}
	lastLogs, err := decodeTxLog(last.Data)
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: message %d: %w", last.Sequence, err)
	}
	lastKey := txKey(last.Sequence, len(lastLogs)-1)
	if uint64(lastKey) < floor {
		return st, nil
	}
	first, err := d.st.GetMsg(rctx, max(floor>>logShift, 1), jetstream.WithGetMsgSubject(d.txLogSubj))
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: first entry: %w", err)
	}
	firstLogs, err := decodeTxLog(first.Data)
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: message %d: %w", first.Sequence, err)
	}
	totalFirst, err1 := strconv.ParseUint(first.Header.Get(hdrLogTotal), 10, 64)
	totalLast, err2 := strconv.ParseUint(last.Header.Get(hdrLogTotal), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("jetstream: log stats: running totals: %w", err)
	}
	firstKey := txKey(first.Sequence, 0)
	hidden := 0
	if uint64(firstKey) < floor {
		_, pos := splitKey(driver.LogKey(floor))
		hidden = min(pos, len(firstLogs))
		firstKey = driver.LogKey(floor)
	}
	st.Entries = totalLast - (totalFirst - uint64(len(firstLogs))) - uint64(hidden)
	if st.Entries == 0 {
		return st, nil
	}
	if hidden == len(firstLogs) {
		// Every entry of the first message is below the floor: the first
		// retained one opens the next message.
		next, err := d.st.GetMsg(rctx, first.Sequence+1, jetstream.WithGetMsgSubject(d.txLogSubj))
		if err != nil {
			return st, fmt.Errorf("jetstream: log stats: first entry: %w", err)
		}
		firstKey = txKey(next.Sequence, 0)
	}
	st.First, st.Last = firstKey, lastKey
	info, err := d.st.Info(rctx, jetstream.WithSubjectFilter(d.txLogSubj))
	if err != nil {
		return st, fmt.Errorf("jetstream: log stats: %w", err)
	}
	if info.State.Msgs > 0 {
		st.Bytes = uint64(float64(info.State.Bytes) * float64(info.State.Subjects[d.txLogSubj]) / float64(info.State.Msgs))
	}
	return st, nil
}
