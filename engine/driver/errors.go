package driver

import "errors"

// Sentinel errors. Engines wrap them with %w and callers test them with
// errors.Is; the wrapping text says which key, option or limit was involved.
var (
	// ErrNotFound reports that a key has no value in the snapshot read.
	ErrNotFound = errors.New("engine: key not found")
	// ErrConflict reports that a commit's Expect checks did not hold when it
	// was applied. Nothing of the commit was applied.
	ErrConflict = errors.New("engine: conflict: expected value did not match")
	// ErrClosed reports use of an engine (or snapshot, iterator) after Close.
	ErrClosed = errors.New("engine: closed")
	// ErrInvalidKey reports an empty key.
	ErrInvalidKey = errors.New("engine: invalid key")
	// ErrKeyTooLarge reports a key longer than MaxKeySize.
	ErrKeyTooLarge = errors.New("engine: key too large")
	// ErrValueTooLarge reports a value or log entry longer than MaxValueSize.
	ErrValueTooLarge = errors.New("engine: value too large")
	// ErrBatchTooLarge reports a batch over MaxBatchEntries or MaxBatchBytes.
	ErrBatchTooLarge = errors.New("engine: batch too large")
	// ErrEmptyBatch reports a batch with no operation, check or log entry.
	ErrEmptyBatch = errors.New("engine: empty batch")
	// ErrLogTruncated reports a log scan that starts below the truncation
	// floor: entries it asked for were removed by retention.
	ErrLogTruncated = errors.New("engine: log truncated below requested key")
	// ErrUnknownEngine reports an engine name no driver registered.
	ErrUnknownEngine = errors.New("engine: unknown engine")
	// ErrUnavailable reports an engine left out of this build.
	ErrUnavailable = errors.New("engine: not available in this build")
	// ErrInvalidOption reports a bad option value or an unknown parameter.
	ErrInvalidOption = errors.New("engine: invalid option")
	// ErrCorrupt reports stored data that cannot be decoded.
	ErrCorrupt = errors.New("engine: corrupt data")
	// ErrInUse reports a data directory another open engine holds.
	ErrInUse = errors.New("engine: data directory in use")
	// ErrWriteFailed reports a commit the store could not make durable: a
	// full disk or a failing write. The commit's handle completes with it
	// (never with success), so nothing of the commit may be acknowledged;
	// whether its effects survive is undefined, as after a crash. While
	// the engine cannot write it refuses commits with it at once, Health
	// reports it, and the engine recovers on its own when writes succeed
	// again (each driver documents how).
	ErrWriteFailed = errors.New("engine: storage write failed")
)
