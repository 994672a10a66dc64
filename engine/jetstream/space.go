//go:build !nojetstream

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// The embedded server on a full disk (see the package doc, "A full
// disk"). nats-server limits a JetStream store to 75% of the disk space
// free when it starts (plus what it recovered) and past that refuses
// every publish for good: the limit never follows space that returns.
// And when a write of a stream's file store fails (ENOSPC), the
// standalone server keeps the error on the store and fails every later
// write to the stream without an answer. So the engine starts the server
// with a store limit it never reaches (embeddedMaxStore), keeps the disk
// from filling with a space guard (engine/internal/space) that admits a
// group of commits only when spaceFactor times its bytes leave reserve_mb
// plus the index's memtables free, and, when the store failed a write
// anyway, restarts JetStream in the same server once space returns
// (restartStore). A publish the server refuses for lack of resources
// (an external server's limits) fails its commits with
// driver.ErrWriteFailed too.

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

// storageRefused wraps err with driver.ErrWriteFailed when it is the
// server refusing a write for lack of storage, and records it on the
// guard so Health reports it until space returns.
func (d *db) storageRefused(err error) error {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || errors.Is(err, driver.ErrWriteFailed) {
		return err
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageExceeded:
	default:
		return err
	}
	err = fmt.Errorf("%w: %w", driver.ErrWriteFailed, err)
	if d.space != nil {
		_ = d.space.Fail(err) // recorded for Health; err goes back to the commit
	}
	return err
}

// Health reports whether the engine takes commits: nil, or an error
// wrapping driver.ErrWriteFailed (the disk of the embedded server is
// short of space, or a transaction's outcome is unknown and the engine
// fails commits at once until the stream answers) or driver.ErrClosed.
func (d *db) Health() error {
	if d.isClosed() {
		return fmt.Errorf("jetstream: %w", driver.ErrClosed)
	}
	if d.lostNow.Load() {
		return fmt.Errorf("jetstream: %w: waiting for the stream to answer", errOutcomeUnknown)
	}
	if d.space == nil {
		return nil
	}
	return d.space.Health()
}

// serverWriteFailed is called when the embedded server's store failed a
// write. The server then fails every later write to the stream without
// answering, so the engine refuses commits at once, gives up on the one
// in flight, and restarts the store once space returns (restartStore).
func (d *db) serverWriteFailed(msg string) {
	err := fmt.Errorf("jetstream: %w: the embedded server's store failed a write: %s", driver.ErrWriteFailed, msg)
	if d.broken.CompareAndSwap(nil, &err) {
		_ = d.space.Fail(err) // recorded for Health; commits get it from Admit
		close(*d.down.Load())
		d.cancelInflight()
	}
}

// storeDown returns a channel closed while the server's store has failed
// a write, so waits for its answers end at once.
func (d *db) storeDown() <-chan struct{} { return *d.down.Load() }

// storeErr returns the write failure the server's store reported.
func (d *db) storeErr() error {
	if b := d.broken.Load(); b != nil {
		return *b
	}
	return nil
}

// restartStore runs once space returned: when the server's store failed a
// write, it shuts JetStream down and enables it again, which reloads the
// stream from its files as a restart would (a partial last record is
// dropped), and waits until the stream answers.
func (d *db) restartStore() error {
	if d.broken.Load() == nil {
		return nil
	}
	cfg := d.srv.JetStreamConfig()
	if cfg == nil {
		return fmt.Errorf("jetstream: restart the store: JetStream is not running")
	}
	d.log.Info("restarting the embedded server's JetStream after a failed write")
	if err := d.srv.ShutdownJetStream(); err != nil {
		return fmt.Errorf("jetstream: shut JetStream down: %w", err)
	}
	// The config holds the store directory with the server's own suffix,
	// which EnableJetStream adds again.
	cfg.StoreDir = filepath.Dir(cfg.StoreDir)
	if err := d.srv.EnableJetStream(cfg); err != nil {
		return fmt.Errorf("jetstream: enable JetStream again: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := d.js.Stream(ctx, d.name); err != nil {
		return fmt.Errorf("jetstream: stream %s after restarting JetStream: %w", d.name, err)
	}
	down := make(chan struct{})
	d.down.Store(&down)
	d.broken.Store(nil)
	return nil
}
