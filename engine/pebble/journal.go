//go:build !nopebble

package pebble

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// The commit journal, under SyncNone and SyncInterval (engine parameter
// journal_kb; 0 goes without). It is the store's write-ahead log in those
// modes: Pebble runs with its own WAL disabled.
//
// A commit completes, in those modes, once it is in the operating system,
// so that a process crash loses none that completed. Through Pebble's WAL
// that took two hand-offs between goroutines per commit: Pebble keeps the
// WAL's last 32 KiB block in memory until it fills or a sync is asked
// for, so the committer asked for one and waited for the WAL writer. It
// also made a full disk dangerous: a WAL written only as its blocks fill
// meets a failing write first where Pebble closes it at a memtable
// rotation, and Pebble panics there and the process ends. The journal
// keeps the promise with neither: each commit's batch is copied, by the
// committer, into a file mapped shared into memory. A store into such a
// mapping is in the page cache at once, so a process crash keeps it as it
// keeps what write(2) wrote; an operating-system crash may lose it, which
// these modes allow (SyncInterval's periodic sync is an fdatasync of the
// journal). Each journaled batch also sets journalKey to its sequence
// number, so after a crash the store's tables say which journaled commits
// they hold, and opening applies the rest again (replayJournal) and
// flushes them into the tables.
//
// The file is two halves. Records follow one another from the start of a
// half; each is a header (CRC-32C of the rest, length, sequence number)
// and the batch's Pebble representation. When the next does not fit, the
// committer starts a flush of Pebble's memtables, which covers every
// record of the half, and goes on in the other half once the flush
// started when that one filled is done: a record is written over only
// once the tables hold its commit. A batch too large for a half is
// applied and flushed before it completes. A reader takes records from
// the start of each half while each checks out and its sequence number
// follows the one before, so records of an earlier round, or one a crash
// cut short, end the scan.

// journalName is the journal's file in the data directory.
const journalName = "tidemark-journal"

// journalHeader is a record's header: CRC-32C, length, sequence number.
const journalHeader = 4 + 4 + 8

// batchHeader is the length of a Pebble batch's header: sequence number
// and count.
const batchHeader = 12

// journalKey holds the sequence number of the last journaled commit
// applied (8 bytes, big-endian).
var journalKey = []byte{kvlog.MetaPrefix, 'j', 'o', 'u', 'r', 'n', 'a', 'l'}

var journalCRC = crc32.MakeTable(crc32.Castagnoli)

// errJournalNoSpace reports a disk without the space a journal reserves.
var errJournalNoSpace = errors.New("pebble: no space for the commit journal")

// journalRecord is one record read back: its sequence number and batch.
type journalRecord struct {
	seq  uint64
	repr []byte
}

// sealJournalRecord writes the header of the record at the start of b,
// whose n bytes of batch follow the header already: a record is written
// batch first and header last, so one a crash cut short fails its check.
func sealJournalRecord(b []byte, seq uint64, n int) {
	binary.LittleEndian.PutUint32(b[4:], uint32(n)) //nolint:gosec // bounded by the journal's size
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint32(b[0:], crc32.Checksum(b[4:journalHeader+n], journalCRC))
}

// journalSetMax bounds what setting journalKey adds to a batch.
const journalSetMax = 1 + binary.MaxVarintLen32 + 8 + binary.MaxVarintLen32 + 8

// submitJournaled commits pb (b's batch, log key k) under SyncNone or
// SyncInterval through the journal, with mu held, and returns its
// completed handle, having let mu go.
func (d *db) submitJournaled(pb *pebble.Batch, b *driver.Batch, k driver.LogKey, applied func(error)) *driver.Handle {
	if !d.jr.fits(pb.Len() + journalSetMax) {
		return d.submitFlushed(pb, b, k, applied)
	}
	var pos [8]byte
	binary.BigEndian.PutUint64(pos[:], d.jr.seq+1)
	_ = pb.Set(journalKey, pos[:], nil)
	repr := pb.Repr()
	if !d.jr.room(len(repr)) {
		if err := d.nextJournalHalf(); err != nil {
			d.mu.Unlock()
			_ = pb.Close()
			return driver.Completed(driver.Result{}, err)
		}
	}
	// Copied before the apply, which may take a large batch's contents.
	d.jr.put(repr)
	n := len(repr)
	err := d.guard("apply", func() error { return d.pdb.Apply(pb, pebble.NoSync) })
	applied(err)
	if err != nil {
		d.mu.Unlock()
		return driver.Completed(driver.Result{}, err)
	}
	d.jr.seal(n)
	return d.completeJournaled(pb, b, k)
}

// completeJournaled completes a commit of pb, applied and in the store's
// tables or journal, with mu held, and lets mu go.
func (d *db) completeJournaled(pb *pebble.Batch, b *driver.Batch, k driver.LogKey) *driver.Handle {
	if len(b.Log) > 0 {
		d.markDurable(k) // under mu: keys complete in order
	}
	d.mu.Unlock()
	_ = pb.Close()
	if len(b.Log) > 0 {
		d.notifier.Notify()
	}
	return driver.CompletedLog(k, len(b.Log))
}

// submitFlushed commits a batch too large for the journal, with mu held
// (later commits must not complete first): it applies it and flushes it,
// with every commit before it, into the store's tables.
func (d *db) submitFlushed(pb *pebble.Batch, b *driver.Batch, k driver.LogKey, applied func(error)) *driver.Handle {
	err := d.guard("apply", func() error { return d.pdb.Apply(pb, pebble.NoSync) })
	applied(err)
	if err == nil {
		err = d.guard("flush", d.pdb.Flush)
	}
	if err != nil {
		d.mu.Unlock()
		return driver.Completed(driver.Result{}, err)
	}
	return d.completeJournaled(pb, b, k)
}

// nextJournalHalf moves the journal to its other half, with mu held: it
// starts the flush that will hold the current half's commits, and waits
// for the one started when the other half filled.
func (d *db) nextJournalHalf() error {
	var left <-chan struct{}
	err := d.guard("flush", func() (err error) {
		left, err = d.pdb.AsyncFlush()
		return err
	})
	if err != nil {
		return err
	}
	if w := d.jr.flushed[d.jr.half^1]; w != nil {
		if err := d.awaitFlush(w); err != nil {
			return err
		}
	}
	d.jr.next(left)
	return nil
}

// awaitFlush waits for a flush to be done, or for the engine to fail: a
// flush that meets a failing write is retried by Pebble, not reported.
func (d *db) awaitFlush(done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-t.C:
			if err := d.failed(); err != nil {
				return fmt.Errorf("pebble: flush: %w", err)
			}
		}
	}
}

// scanJournal returns the records of a journal's contents in sequence
// order: those of each half, read from its start while each checks out
// and follows the one before. The first half's scan may run on into the
// second (a file of another layout, or a half that filled and led into
// the other): a record read twice is taken once.
func scanJournal(b []byte) []journalRecord {
	recs := scanJournalFrom(b, nil)
	if h := len(b) / 2; h > 0 {
		recs = scanJournalFrom(b[h:], recs)
	}
	slices.SortFunc(recs, func(x, y journalRecord) int { return cmp.Compare(x.seq, y.seq) })
	return slices.CompactFunc(recs, func(x, y journalRecord) bool { return x.seq == y.seq })
}

// scanJournalFrom appends to out the records at the start of b.
func scanJournalFrom(b []byte, out []journalRecord) []journalRecord {
	var prev uint64
	for off := 0; off+journalHeader <= len(b); {
		n := int(binary.LittleEndian.Uint32(b[off+4:]))
		if n <= 0 || n > len(b)-off-journalHeader {
			break
		}
		end := off + journalHeader + n
		if crc32.Checksum(b[off+4:end], journalCRC) != binary.LittleEndian.Uint32(b[off:]) {
			break
		}
		seq := binary.LittleEndian.Uint64(b[off+8:])
		if off > 0 && seq != prev+1 {
			break
		}
		// A journaled batch holds the journal's position at least: its
		// header (sequence number, count) and a count above zero.
		if n < batchHeader || binary.LittleEndian.Uint32(b[off+journalHeader+8:]) == 0 {
			break
		}
		out = append(out, journalRecord{seq: seq, repr: b[off+journalHeader : end]})
		prev = seq
		off = end
	}
	return out
}

// journaledSeq reads the sequence number of the last journaled commit the
// store holds (0: none).
func journaledSeq(pdb *pebble.DB) (uint64, error) {
	v, closer, err := pdb.Get(journalKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pebble: read the journal's position: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("pebble: the journal's position is %d bytes, not 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// readJournal returns the contents of dir's journal (nil: none).
func readJournal(dir string) ([]byte, error) {
	content, err := os.ReadFile(filepath.Join(dir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pebble: read the journal: %w", err)
	}
	return content, nil
}

// replayJournal applies the commits of a journal's contents that the
// store lacks, makes them durable (with journaled, the store's WAL is
// disabled: by a flush into its tables; otherwise by a sync of the WAL),
// and returns the last sequence number the store and the journal know.
// Journaled commits are applied only where they continue the store:
// records that start past the commit after the store's last (an
// operating-system crash kept a later part of the journal and not the
// part before) are left out, with a warning, rather than applied with a
// hole before them.
func replayJournal(pdb *pebble.DB, content []byte, journaled bool, log *slog.Logger) (uint64, error) {
	last, err := journaledSeq(pdb)
	if err != nil {
		return 0, err
	}
	recs := scanJournal(content)
	applied, skipped := 0, 0
	for _, r := range recs {
		switch {
		case r.seq <= last:
			continue
		case r.seq != last+1:
			skipped++
			continue
		}
		if err := applyJournalRecord(pdb, r); err != nil {
			return 0, err
		}
		last = r.seq
		applied++
	}
	if skipped > 0 {
		log.Warn("the commit journal does not continue the store (the operating system lost part of it); its later commits are left out",
			"store_at", last, "left_out", skipped)
	}
	wrote := applied > 0
	if n := len(recs); n > 0 && recs[n-1].seq > last {
		// Numbers go on past those left out, and the store takes that
		// position, so the records written next follow it.
		last = recs[n-1].seq
		var pos [8]byte
		binary.BigEndian.PutUint64(pos[:], last)
		if err := pdb.Set(journalKey, pos[:], pebble.NoSync); err != nil {
			return 0, fmt.Errorf("pebble: write the journal's position: %w", err)
		}
		wrote = true
	}
	if wrote {
		durable := func() error { return pdb.LogData(nil, pebble.Sync) }
		if journaled {
			durable = pdb.Flush
		}
		if err := durable(); err != nil {
			return 0, fmt.Errorf("pebble: store the commits applied from the journal: %w", err)
		}
	}
	if applied > 0 {
		log.Info("commits completed before a crash applied again from the journal", "commits", applied)
	}
	return last, nil
}

// applyJournalRecord applies r's batch without a sync. A batch Pebble
// cannot take, even by panicking, is an error wrapping driver.ErrCorrupt:
// the store stays as it was and does not open.
func applyJournalRecord(pdb *pebble.DB, r journalRecord) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pebble: apply journal record %d: %w: %v", r.seq, driver.ErrCorrupt, p)
		}
	}()
	b := pdb.NewBatch()
	if err := b.SetRepr(r.repr); err != nil {
		return fmt.Errorf("pebble: journal record %d: %w: %w", r.seq, driver.ErrCorrupt, err)
	}
	if err := pdb.Apply(b, pebble.NoSync); err != nil {
		return fmt.Errorf("pebble: apply journal record %d: %w", r.seq, err)
	}
	return nil
}

// openJournal applies the journal's contents (nil: read the file) to the
// store just opened and, with the journal in use (d.jr, mapped before
// the store was opened without its WAL), starts it over after them;
// without one it removes the file once applied. Called while no commit
// runs (open, or a reopen while commits are refused).
func (d *db) openJournal(content []byte) error {
	if content == nil {
		var err error
		if content, err = readJournal(d.opts.Dir); err != nil {
			return err
		}
	}
	seq, err := replayJournal(d.pdb, content, d.jr != nil, d.log)
	if err != nil {
		return err
	}
	if d.jr == nil {
		if err := os.Remove(filepath.Join(d.opts.Dir, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pebble: remove the applied journal: %w", err)
		}
		return nil
	}
	d.jr.restart(seq)
	return nil
}

// closeJournal unmaps the journal; its file stays for the next open.
func (d *db) closeJournal() {
	if d.jr != nil {
		if err := d.jr.close(); err != nil {
			d.log.Warn("closing the commit journal failed", "err", err)
		}
		d.jr = nil
	}
}
