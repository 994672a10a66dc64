package driver

import "fmt"

// Limits every engine accepts. They are the smallest common bounds of the
// backends (LMDB keys are at most 511 bytes including the engine's prefix;
// JetStream messages carry the value plus headers), so code written against
// one engine runs unchanged on every other.
const (
	// MaxKeySize is the longest key, in bytes, a batch may name.
	MaxKeySize = 480
	// MaxValueSize is the longest value or log entry, in bytes.
	MaxValueSize = 4 << 20
	// MaxBatchEntries bounds the number of operations, checks and log
	// entries in one batch.
	MaxBatchEntries = 8192
	// MaxBatchBytes bounds the total key and value bytes of one batch.
	MaxBatchBytes = 32 << 20
)

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpPut stores Value under Key.
	OpPut OpKind = iota + 1
	// OpDelete removes Key; deleting an absent key is not an error.
	OpDelete
)

// Op is one write of a Batch.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte
}

// Check is a precondition of a Batch: when the batch is applied, Key must
// hold exactly Value, or be absent when Absent is set. A failed check fails
// the whole batch with ErrConflict.
type Check struct {
	Key    []byte
	Value  []byte
	Absent bool
}

// Batch is one atomic commit: every check holds and every op and log entry
// is applied, or nothing is. Ops apply in order, so a later put of a key
// wins over an earlier one. The engine owns the slices after Submit: callers
// must not modify them until the commit's handle has completed.
type Batch struct {
	Ops    []Op
	Checks []Check
	// Log holds the change-log entries the commit appends, in order. The
	// engine assigns their keys (see Granularity). It may keep the entries'
	// bytes to answer scans, so they must not be modified after Submit.
	Log [][]byte
	// Defer says nobody waits on this commit at once, so under SyncAlways
	// the engine may hold its sync for up to Options.DeferWindow to share
	// the sync of a commit submitted after it. Engines do so only while
	// commits not marked Defer keep coming (one within the window before
	// it): otherwise there is no sync to share. The handle still completes
	// only when the commit is durable; checks, ordering and visibility are
	// those of any commit.
	Defer bool
	// Ordered, when set, is called by an engine whose Submit waits for
	// the commit's write before it returns: on the submitting goroutine,
	// at most once, once the commit's checks passed, its log keys are
	// assigned and it is visible to reads, before the wait. A caller that
	// serializes its submits (to keep its own order equal to the log's)
	// may let the next one in from there: commits submitted meanwhile
	// share the write. Engines that return without waiting do not call it.
	Ordered func()
}

// Put appends a put of key to value.
func (b *Batch) Put(key, value []byte) *Batch {
	b.Ops = append(b.Ops, Op{Kind: OpPut, Key: key, Value: value})
	return b
}

// Delete appends a delete of key.
func (b *Batch) Delete(key []byte) *Batch {
	b.Ops = append(b.Ops, Op{Kind: OpDelete, Key: key})
	return b
}

// Append adds one change-log entry.
func (b *Batch) Append(entry []byte) *Batch {
	b.Log = append(b.Log, entry)
	return b
}

// Expect requires key to hold value when the batch is applied.
func (b *Batch) Expect(key, value []byte) *Batch {
	b.Checks = append(b.Checks, Check{Key: key, Value: value})
	return b
}

// ExpectAbsent requires key to be absent when the batch is applied.
func (b *Batch) ExpectAbsent(key []byte) *Batch {
	b.Checks = append(b.Checks, Check{Key: key, Absent: true})
	return b
}

// Len is the number of ops, checks and log entries.
func (b *Batch) Len() int { return len(b.Ops) + len(b.Checks) + len(b.Log) }

// Reset empties the batch for reuse, keeping its capacity.
func (b *Batch) Reset() {
	b.Ops, b.Checks, b.Log = b.Ops[:0], b.Checks[:0], b.Log[:0]
}

// Validate reports the first limit the batch breaks, wrapped around one of
// ErrEmptyBatch, ErrInvalidKey, ErrKeyTooLarge, ErrValueTooLarge or
// ErrBatchTooLarge. The engine front calls it in Submit, so a backend
// only ever sees valid batches.
func (b *Batch) Validate() error {
	if b == nil || b.Len() == 0 {
		return ErrEmptyBatch
	}
	if n := b.Len(); n > MaxBatchEntries {
		return fmt.Errorf("%w: %d entries, the limit is %d", ErrBatchTooLarge, n, MaxBatchEntries)
	}
	total := 0
	for i := range b.Ops {
		op := &b.Ops[i]
		if err := validKey(op.Key); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		if op.Kind != OpPut && op.Kind != OpDelete {
			return fmt.Errorf("op %d: %w: unknown op kind %d", i, ErrInvalidOption, op.Kind)
		}
		if len(op.Value) > MaxValueSize {
			return fmt.Errorf("op %d: %w: %d bytes, the limit is %d", i, ErrValueTooLarge, len(op.Value), MaxValueSize)
		}
		total += len(op.Key) + len(op.Value)
	}
	for i := range b.Checks {
		if err := validKey(b.Checks[i].Key); err != nil {
			return fmt.Errorf("check %d: %w", i, err)
		}
	}
	for i, e := range b.Log {
		if len(e) > MaxValueSize {
			return fmt.Errorf("log entry %d: %w: %d bytes, the limit is %d", i, ErrValueTooLarge, len(e), MaxValueSize)
		}
		total += len(e)
	}
	if total > MaxBatchBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrBatchTooLarge, total, MaxBatchBytes)
	}
	return nil
}

// ValidKey reports whether key may be read or written: non-empty and at
// most MaxKeySize bytes.
func ValidKey(key []byte) error { return validKey(key) }

func validKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if len(key) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrKeyTooLarge, len(key), MaxKeySize)
	}
	return nil
}
