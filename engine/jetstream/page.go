//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// Page reads (batched direct gets) share the engine's one connection with
// its commits. The server queues a whole page for the connection at once
// and drops a connection whose queue passes its max_pending (64 MiB by
// default) as a slow consumer. Pages of up to the largest message size
// (48 MiB), read by a few subscribers catching up at once after a
// restart, did that over and over: every drop failed the commits and
// reads in flight, and the readers asked for the same pages again.
const (
	// pageBytes bounds the payload one page asks for; the server sends
	// at least one message, however large.
	pageBytes = 1 << 20
	// pageReads bounds the pages in flight at once, so their total stays
	// well under max_pending however many readers there are.
	pageReads = 4
)

// errPageCut reports a page that ended before the server's end of batch:
// its answer stopped coming (the connection dropped, the deadline passed)
// or a message of it was dropped on the way. Reading on past it would skip
// messages, so the read fails instead.
var errPageCut = errors.New("page cut short")

// getPage reads up to scanPage messages on subject from sequence from on,
// none past limit. It returns the sequence after the last one read and
// whether the stream holds more. A page is all of what the server sent or
// an error, never a part: a read that loses messages on the way fails
// with errPageCut.
func (d *db) getPage(ctx context.Context, subject string, from, limit uint64) ([]*jetstream.RawStreamMsg, uint64, bool, error) {
	select {
	case d.pages <- struct{}{}:
	case <-ctx.Done():
		return nil, from, false, ctx.Err()
	}
	defer func() { <-d.pages }()
	rctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	msgs, err := jetstreamext.GetBatch(rctx, d.js, d.name, scanPage,
		jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchSubject(subject), jetstreamext.GetBatchMaxBytes(pageBytes))
	if err != nil {
		return nil, from, false, err
	}
	var page []*jetstream.RawStreamMsg
	more, pending := false, int64(-1)
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, from, false, err
		}
		if m.Sequence > limit {
			return page, from, false, nil
		}
		// The server counts the messages left down by one per message
		// it sends: a step of more than one is a message lost between
		// it and here.
		np, perr := strconv.ParseInt(m.Header.Get("Nats-Num-Pending"), 10, 64)
		if perr != nil {
			return nil, from, false, fmt.Errorf("%w: message %d has no pending count: %w", errPageCut, m.Sequence, perr)
		}
		if pending >= 0 && np != pending-1 && (np != 0 || pending != 0) {
			return nil, from, false, fmt.Errorf("%w: messages dropped before %d (%d pending after the one before, %d after it)", errPageCut, m.Sequence, pending, np)
		}
		pending = np
		page = append(page, m)
		from = m.Sequence + 1
		more = np != 0
	}
	// The iterator ends quietly when its deadline passes, as it does at
	// the end of the batch: tell them apart.
	if err := rctx.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, from, false, ctx.Err()
		}
		return nil, from, false, fmt.Errorf("%w: no end of batch within %v after %d messages: %w", errPageCut, opTimeout, len(page), err)
	}
	return page, from, more, nil
}
