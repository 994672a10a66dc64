//go:build !nojetstream

package jetstream

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine"
)

// The embedded server on a full disk. nats-server limits a JetStream
// store to 75% of the disk space free when it starts (plus what it
// recovered), and past that answers every publish with "insufficient
// resources", for good: the limit never follows space that returns. And
// when a write to a stream's file store does fail (ENOSPC), the standalone
// server keeps that error on the store and fails every later write to the
// stream without an answer, until the server restarts. Neither recovers
// by itself, so the engine starts the embedded server with a store limit
// it never reaches (embeddedMaxStore) and keeps the disk from filling
// itself: before each group of commits it asks a space guard
// (engine/internal/space) whether three times the group's bytes (the
// transaction message, the materialized copy of its keys, the index's
// copy) fit while leaving reserve_mb plus the index's memtables free, and
// refuses the group with engine.ErrWriteFailed (wrapping syscall.ENOSPC)
// when not. From the first refusal every commit is refused at once and
// Health reports it, until the reserve plus 1 MiB is free again and a
// probe file can be written; the server never saw a failed write, so
// nothing needs restarting. A publish the server refuses for resources
// (an external server's limits, or an embedded one's) fails the commit
// with engine.ErrWriteFailed too.

// embeddedMaxStore is the embedded server's JetStream store limit: a
// PiB, so the limit the server would derive from the free space at start
// never stops the engine; the space guard keeps the disk from filling.
const embeddedMaxStore = 1 << 50

// defaultReserveMB is the default reserve_mb: room for the index's
// flushes and compactions and the server's own state files.
const defaultReserveMB = 64

// spaceFactor is how many times a group's bytes the guard counts: the
// transaction message, the materializer's copy of its keys and the
// index's.
const spaceFactor = 3

// Error codes of a server refusing a write for lack of resources.
const (
	errCodeInsufficientResources = 10023
	errCodeStorageExceeded       = 10047
)

// reserve returns the bytes the guard keeps free: reserve_mb plus the
// index's memtables, which it flushes to the same disk.
func (d *db) reserve() int64 {
	return d.reserveBytes + d.idx.memtableBytes()
}

// admit asks the guard, when the engine runs its own server, whether the
// commits of group may be written.
func (d *db) admit(group []*pending) error {
	if d.space == nil {
		return nil
	}
	n := 0
	for _, p := range group {
		n += p.bytes
	}
	if err := d.space.Admit(spaceFactor * int64(n)); err != nil {
		return fmt.Errorf("jetstream: commit: %w", err)
	}
	return nil
}

// storageRefused wraps err with engine.ErrWriteFailed when it is the
// server refusing a write for lack of storage, and records it on the
// guard so Health reports it until space returns.
func (d *db) storageRefused(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || errors.Is(err, engine.ErrWriteFailed) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageExceeded:
	default:
		return err
	}
	err = fmt.Errorf("%w: %w", engine.ErrWriteFailed, err)
	if d.space != nil {
		_ = d.space.Fail(err) // recorded for Health; err goes back to the commit
	}
	return err
}

// Health reports whether the engine takes commits: nil, or an error
// wrapping engine.ErrWriteFailed (the disk of the embedded server is
// short of space) or engine.ErrClosed.
func (d *db) Health() error {
	if d.isClosed() {
		return fmt.Errorf("jetstream: %w", engine.ErrClosed)
	}
	if d.space == nil {
		return nil
	}
	return d.space.Health()
}
