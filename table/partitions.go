package table

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark-io/tidemark/engine"
)

// ErrPartitionMismatch reports an engine opened as a partition it was not
// made as: another partition count or index than the one it records, a
// partition of several opened alone with Open, or a store with data opened
// as one of several partitions. It wraps engine.ErrInvalidOption.
var ErrPartitionMismatch = fmt.Errorf("table: partition mismatch: %w", engine.ErrInvalidOption)

// MaxPartitions is the most partitions OpenPartitions takes.
const MaxPartitions = 1024

var metaPartition = []byte{kindMeta, 'p', 'a', 'r', 't'}

// Partitions is one set of tables split over several DBs, each on its own
// engine, so that commits to different partitions never wait for one
// another: on the JetStream engine each partition is a stream, and the
// streams can be led by different servers.
//
// A key (a client id, say) names its partition by a stable hash (Of), so
// every node that opens the same engines in the same order routes a key
// to the same partition. A transaction commits within one partition,
// atomically, exactly as on a DB; nothing is atomic across partitions.
// Each partition has its own change log: a subscription (Subscribe) reads
// every partition and resumes from one Cursor per partition (Cursors),
// keeping in each partition the guarantees of a DB's subscription, and
// there is no order between events of different partitions.
//
// The partition count is fixed when the partitions are first opened and
// recorded in each engine with its index; opening them with another count
// or in another order fails with ErrPartitionMismatch, naming both, rather
// than routing keys where their records are not. Versions come from one
// clock shared by the partitions, so a node's versions increase across
// partitions too.
type Partitions struct {
	dbs []*DB
}

// OpenPartitions opens engines as the partitions of one set of tables,
// engines[i] as partition i. On first use each engine must be empty
// (except with a single engine, which may hold an existing store); later
// opens must pass the same engines in the same order. The DBs do not own
// the engines: Close stops the DBs and the caller closes the engines.
func OpenPartitions(ctx context.Context, engines []engine.Engine, opts Options) (*Partitions, error) {
	n := len(engines)
	if n == 0 || n > MaxPartitions {
		return nil, fmt.Errorf("table: open partitions: %d engines, want 1 to %d: %w", n, MaxPartitions, engine.ErrInvalidOption)
	}
	// Check every engine before recording a partition in any: a wrong
	// set of engines leaves none of them claimed.
	var unclaimed []int
	for i, e := range engines {
		if e == nil {
			return nil, fmt.Errorf("table: open partitions: engine %d is nil: %w", i, engine.ErrInvalidOption)
		}
		claimed, err := checkPartition(ctx, e, i, n)
		if err != nil {
			return nil, err
		}
		if !claimed && n > 1 {
			unclaimed = append(unclaimed, i)
		}
	}
	for _, i := range unclaimed {
		v := binary.AppendUvarint(binary.AppendUvarint(nil, uint64(i)), uint64(n))
		h, err := engines[i].Submit(ctx, new(engine.Batch).Put(metaPartition, v))
		if err == nil {
			_, err = h.Wait(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("table: open partition %d of %d: recording it: %w", i, n, err)
		}
	}
	p := &Partitions{dbs: make([]*DB, 0, n)}
	for i, e := range engines {
		db, err := open(ctx, e, opts)
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		db.part, db.parts = i, n
		p.dbs = append(p.dbs, db)
	}
	// One clock, seeded above every partition's floor: Next on each DB's
	// own clock is above that DB's floor.
	clk := p.dbs[0].hlc
	for _, db := range p.dbs[1:] {
		clk.Observe(db.hlc.Next())
		db.hlc = clk
	}
	return p, nil
}

// checkPartition checks that e records partition i of n, or that it
// records none and can be made partition i: it is empty, or n is 1 (a
// single partition records nothing, so a store opened with Open and one
// opened as the only partition are the same store). It reports whether e
// records its partition.
func checkPartition(ctx context.Context, e engine.Engine, i, n int) (bool, error) {
	gi, gn, ok, err := readPartition(ctx, e)
	switch {
	case err != nil:
		return false, err
	case ok && (gi != i || gn != n):
		return false, fmt.Errorf("%w: the engine opened as partition %d of %d holds partition %d of %d: open every partition, in the order they were made",
			ErrPartitionMismatch, i, n, gi, gn)
	case ok || n == 1:
		return ok, nil
	}
	empty, err := emptyStore(ctx, e)
	if err != nil {
		return false, fmt.Errorf("table: open partition %d of %d: %w", i, n, err)
	}
	if !empty {
		return false, fmt.Errorf("%w: the engine opened as partition %d of %d holds a store made unpartitioned: open it alone, or move its data into new partitions",
			ErrPartitionMismatch, i, n)
	}
	return false, nil
}

// readPartition returns the partition e records, if any.
func readPartition(ctx context.Context, e engine.Engine) (i, n int, ok bool, err error) {
	v, err := engine.Get(ctx, e, metaPartition)
	if errors.Is(err, engine.ErrNotFound) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("table: open: reading the partition record: %w", err)
	}
	ui, k := binary.Uvarint(v)
	un, m := binary.Uvarint(v[max(k, 0):])
	if k <= 0 || m <= 0 || k+m != len(v) || un == 0 || un > MaxPartitions || ui >= un {
		return 0, 0, false, fmt.Errorf("table: open: partition record %x: %w", v, engine.ErrCorrupt)
	}
	return int(ui), int(un), true, nil
}

// checkUnpartitioned refuses, in Open, an engine that holds one partition
// of several: alone, its keys are not all the keys routed to it.
func checkUnpartitioned(ctx context.Context, e engine.Engine) error {
	i, n, ok, err := readPartition(ctx, e)
	if err != nil || !ok || n == 1 {
		return err
	}
	return fmt.Errorf("%w: the engine holds partition %d of %d: open all of them with OpenPartitions", ErrPartitionMismatch, i, n)
}

// emptyStore reports whether e holds no log and no key but the table
// layer's metadata.
func emptyStore(ctx context.Context, e engine.Engine) (bool, error) {
	st, err := e.LogStats(ctx)
	if err != nil {
		return false, err
	}
	if st.Last != 0 || st.Floor != 0 {
		return false, nil
	}
	snap, err := e.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	defer snap.Close()
	it, err := snap.Iter(ctx, []byte{0}, []byte{0xff})
	if err != nil {
		return false, err
	}
	defer it.Close()
	for it.Next() {
		// A DB opened and closed without a write leaves only metadata
		// (the head hint): no record a partition could misplace.
		if k := it.Key(); len(k) == 0 || k[0] != kindMeta {
			return false, nil
		}
	}
	return true, it.Err()
}

// OnePartition returns db as the only partition of a Partitions, for code
// written for partitioned tables to run on a DB that is not split (a
// single partition records nothing, see OpenPartitions). Close closes db.
// A DB that is one of several partitions (see DB.Partition) has its own
// Partitions, which code that writes must use instead.
func OnePartition(db *DB) *Partitions { return &Partitions{dbs: []*DB{db}} }

// Partition returns db's place among the partitions it was opened with
// (OpenPartitions): its index and their count, 0 and 1 for a DB opened
// alone.
func (db *DB) Partition() (index, count int) { return db.part, max(db.parts, 1) }

// Count returns the number of partitions.
func (p *Partitions) Count() int { return len(p.dbs) }

// Of returns the partition of key: FNV-1a (64 bits) of key, modulo Count.
// The mapping is part of the stored format: it never changes for a count.
func (p *Partitions) Of(key string) int { return PartitionOf(key, len(p.dbs)) }

// PartitionOf is Of for a count of n partitions, without opening them.
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	// FNV-1a, 64 bits, written out so that a lookup per message
	// allocates nothing.
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	return int(h % uint64(n))
}

// DB returns partition i; it panics when i is out of range.
func (p *Partitions) DB(i int) *DB { return p.dbs[i] }

// For returns the partition of key.
func (p *Partitions) For(key string) *DB { return p.dbs[p.Of(key)] }

// GetLatest returns the newest state of table/id among all partitions, by
// version, and the partition holding it (-1 when none ever held it): for
// a record that more than one
// partition may write (a retained message written in its publisher's
// partition, say). A deletion newer than every write hides them, with an
// error wrapping ErrNotFound as Get's does. It reads the partitions one
// after the other, not one snapshot: a write landing meanwhile may or may
// not be seen, as with a Get just before or after it.
func (p *Partitions) GetLatest(ctx context.Context, table, id string) (Record, int, error) {
	var best Record
	at, bestErr := -1, error(nil)
	for i, db := range p.dbs {
		r, err := db.Get(ctx, table, id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return Record{}, i, fmt.Errorf("partition %d: %w", i, err)
		}
		if r.Version == 0 { // never written here
			if at < 0 {
				best, bestErr = r, err
			}
			continue
		}
		if at < 0 || best.Version < r.Version {
			best, at, bestErr = r, i, err
		}
	}
	return best, at, bestErr
}

// Head returns each partition's Head: a subscription from it delivers
// exactly the entries committed after Head returned.
func (p *Partitions) Head(ctx context.Context) (Cursors, error) {
	cs := make(Cursors, len(p.dbs))
	for i, db := range p.dbs {
		c, err := db.Head(ctx)
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", i, err)
		}
		cs[i] = c
	}
	return cs, nil
}

// TruncateBelow truncates each partition's log below its cursor (see
// DB.TruncateBelow); cs must have one cursor per partition.
func (p *Partitions) TruncateBelow(ctx context.Context, cs Cursors) error {
	if err := p.checkCursors(cs); err != nil {
		return err
	}
	for i, db := range p.dbs {
		if err := db.TruncateBelow(ctx, cs[i]); err != nil {
			return fmt.Errorf("partition %d: %w", i, err)
		}
	}
	return nil
}

// Close closes every partition's DB (not the engines). It returns the
// first error.
func (p *Partitions) Close() error {
	var first error
	for _, db := range p.dbs {
		if err := db.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *Partitions) checkCursors(cs Cursors) error {
	if len(cs) != len(p.dbs) {
		return fmt.Errorf("%w: %d cursors for %d partitions", ErrBadCursor, len(cs), len(p.dbs))
	}
	return nil
}

// Cursors is a position in partitioned tables: one Cursor per partition,
// in partition order. The zero-length Cursors is not a position; use
// make(Cursors, n) for the beginning of n partitions' logs.
type Cursors []Cursor

// String renders cs as its text form: the cursors' text forms joined by
// commas, such as "12,7.3,0".
func (cs Cursors) String() string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.String())
	}
	return b.String()
}

// MarshalText encodes cs as String does; the form is stable.
func (cs Cursors) MarshalText() ([]byte, error) { return []byte(cs.String()), nil }

// UnmarshalText decodes the form MarshalText writes.
func (cs *Cursors) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), ",")
	if len(parts) > MaxPartitions {
		return fmt.Errorf("%w: %d cursors, the most is %d: %w", ErrBadCursor, len(parts), MaxPartitions, engine.ErrCorrupt)
	}
	out := make(Cursors, len(parts))
	for i, s := range parts {
		if err := out[i].UnmarshalText([]byte(s)); err != nil {
			return err
		}
	}
	*cs = out
	return nil
}

// MarshalBinary encodes cs as a count (uvarint) followed by each cursor's
// binary form behind its length (one byte); the form is stable.
func (cs Cursors) MarshalBinary() ([]byte, error) {
	b := binary.AppendUvarint(make([]byte, 0, 1+13*len(cs)), uint64(len(cs)))
	for _, c := range cs {
		cb, _ := c.MarshalBinary()
		b = append(append(b, byte(len(cb))), cb...)
	}
	return b, nil
}

// UnmarshalBinary decodes the form MarshalBinary writes.
func (cs *Cursors) UnmarshalBinary(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || n == 0 || n > MaxPartitions {
		return fmt.Errorf("%w: cursors of %d bytes: %w", ErrBadCursor, len(b), engine.ErrCorrupt)
	}
	b = b[k:]
	out := make(Cursors, n)
	for i := range out {
		if len(b) == 0 || len(b) < 1+int(b[0]) {
			return fmt.Errorf("%w: cursors cut short at %d of %d: %w", ErrBadCursor, i, n, engine.ErrCorrupt)
		}
		if err := out[i].UnmarshalBinary(b[1 : 1+b[0]]); err != nil {
			return err
		}
		b = b[1+b[0]:]
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after %d cursors: %w", ErrBadCursor, len(b), n, engine.ErrCorrupt)
	}
	*cs = out
	return nil
}
