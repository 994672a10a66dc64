//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// A transaction whose answer is lost (single-writer layout): the
// connection to the server dropped, or the server did not answer in time.
// The committer asks the stream whether it landed, behind a fence; while
// the stream does not say, it publishes nothing else, since its checks
// are decided on an index that would then disagree with the stream, and
// it fails commits at once rather than hold them.

// resolveTimeout bounds how long the committer asks whether a transaction
// whose answer was lost landed before it fails that transaction's commits
// as of unknown outcome.
const resolveTimeout = 30 * time.Second

// lostLogEvery spaces the error lines of a committer whose server does not
// answer.
const lostLogEvery = 10 * time.Second

// errOutcomeUnknown reports a transaction that may or may not have landed:
// its answer was lost and the stream could not be asked. It wraps
// driver.ErrWriteFailed: nothing of its commits may be acknowledged, and
// their effects may survive or not, as after a crash.
var errOutcomeUnknown = fmt.Errorf("%w: the transaction's outcome is unknown", driver.ErrWriteFailed)

// lostTx is a transaction of unknown outcome, kept (copied) to be applied
// if it turns out to have landed. Committer only.
type lostTx struct {
	id     string
	writes []txWrite
	logs   [][]byte
	// logged is when the committer last logged that it waits for it.
	logged time.Time
}

// publishTx publishes one transaction message and returns its stream
// sequence. When the answer is lost it asks the stream: this engine is
// the only writer, so the message landed exactly when it is the last
// transaction there. When the stream cannot say within resolveTimeout,
// the error wraps errOutcomeUnknown.
func (d *db) publishTx(m *nats.Msg, id string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	// A dropped connection never brings the answer: it cancels the wait
	// at once (the DisconnectErrHandler).
	d.setInflight(cancel)
	ack, err := d.acks.publish(ctx, d.nc, m)
	d.setInflight(nil)
	cancel()
	if err == nil {
		return ack.Sequence, nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return 0, d.storageRefused(fmt.Errorf("jetstream: publish transaction: %w", err))
	}
	d.log.Warn("no answer to a transaction; asking the stream whether it landed", "err", err)
	deadline := time.Now().Add(resolveTimeout)
	for attempt := 1; ; attempt++ {
		if b := d.broken.Load(); b != nil {
			// The store fails every write without an answer, the lookup
			// included; the message was not stored or, at most, is the
			// failed write itself, whose outcome ErrWriteFailed leaves
			// open.
			return 0, fmt.Errorf("jetstream: publish transaction: no acknowledgement (%w): %w", err, *b)
		}
		seq, landed, lerr := d.lookupTx(id)
		switch {
		case lerr == nil && landed:
			return seq, nil
		case lerr == nil:
			return 0, fmt.Errorf("jetstream: publish transaction: no acknowledgement, and it is not in the stream: %w", err)
		}
		if time.Now().After(deadline) || (d.isClosed() && attempt >= 3) {
			d.log.Error("the stream does not say whether a transaction landed; commits fail until it does", "err", err, "lookup_err", lerr)
			return 0, fmt.Errorf("jetstream: publish transaction: %w: no acknowledgement (%w), and the stream did not answer whether it landed (%w)", errOutcomeUnknown, err, lerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// setInflight records the cancel function of the publish awaiting an
// answer (nil: none).
func (d *db) setInflight(cancel context.CancelFunc) {
	d.inflightMu.Lock()
	d.inflightCancel = cancel
	d.inflightMu.Unlock()
}

// keepLost keeps the transaction tx (message id) of unknown outcome until
// the stream says whether it landed. Committer only.
func (d *db) keepLost(id string, tx txPlan) {
	l := &lostTx{id: id, logged: time.Now()}
	for _, w := range tx.writes {
		w.val = append([]byte(nil), w.val...)
		l.writes = append(l.writes, w)
	}
	for _, e := range tx.logs {
		l.logs = append(l.logs, append([]byte(nil), e...))
	}
	d.lost = l
	d.lostNow.Store(true)
}

// resolveLost asks the stream whether the transaction of unknown outcome
// landed, if there is one, and applies it to the index if it did. It
// fails, wrapping errOutcomeUnknown, while the stream does not answer;
// logged reports a transaction with log entries applied. Committer only.
func (d *db) resolveLost() (logged bool, err error) {
	l := d.lost
	if l == nil {
		return false, nil
	}
	seq, landed, lerr := d.lookupTx(l.id)
	if lerr != nil {
		if time.Since(l.logged) >= lostLogEvery {
			d.log.Error("the stream still does not say whether a transaction landed; commits fail until it does", "err", lerr)
			l.logged = time.Now()
		}
		return false, fmt.Errorf("jetstream: commit: %w: an earlier transaction's answer was lost and the stream does not answer (%w)", errOutcomeUnknown, lerr)
	}
	d.lost = nil
	d.lostNow.Store(false)
	d.log.Warn("the stream answered whether a transaction of unknown outcome landed; commits go on", "landed", landed)
	if landed {
		d.landTx(seq, l.writes, l.logs)
	}
	return landed && len(l.logs) > 0, nil
}

// lookupTx reports whether the transaction carrying id landed: it first
// gets a fence message acknowledged on the same connection (the server
// handles one connection's messages in order, so the transaction either
// landed before the fence or never will), then looks at the stream's last
// transaction.
func (d *db) lookupTx(id string) (uint64, bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	f := &nats.Msg{Subject: d.fenceSubj, Header: nats.Header{}}
	f.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if _, err := d.js.PublishMsg(ctx, f); err != nil {
		return 0, false, fmt.Errorf("fence: %w", err)
	}
	last, err := d.st.GetLastMsgForSubject(ctx, d.txPrefix+">")
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, err
	case last.Header.Get(hdrEnd) == id:
		return last.Sequence, true, nil
	}
	return 0, false, nil
}
