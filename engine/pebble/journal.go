//go:build !nopebble

package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/kvlog"
)

// The commit journal, under SyncNone and SyncInterval with the engine
// parameter journal_kb (off by default: see the package doc).
//
// Pebble keeps its write-ahead log's last 32 KiB block in memory until the
// block fills or a sync is asked for, so a commit applied without a sync
// is lost with the process. Asking for one with every commit has Pebble's
// WAL writer write it, and the committer wait for that goroutine: two
// hand-offs between goroutines per commit, a sixth of a window-1
// exchange's time. The journal keeps the same promise without them: each
// commit's batch is also copied, by the committer, into a file mapped
// shared into memory. A store into such a mapping is in the operating
// system's page cache at once, so a process crash keeps it as it keeps
// what write(2) wrote; an operating-system crash may lose it, which these
// modes allow. Each journaled batch also sets journalKey to its sequence
// number, so after a crash the store says which journaled commits its WAL
// kept, and opening applies the rest again (replayJournal).
//
// Records follow one another from the start of the file; each is a
// header (CRC-32C of the rest, length, sequence number) and the batch's
// Pebble representation. When the next does not fit, the committer has
// Pebble write its WAL (a sync request) and starts again at the start of
// the file: every record before is then in the WAL. A reader takes records
// from the start while each checks out and its sequence number follows the
// one before, so records of an earlier round, or one the crash cut short,
// end the scan.

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
// SyncInterval through the journal, with mu held: it applies pb without
// waiting for Pebble's WAL writer, copies it into the journal, and
// returns the completed handle, having let mu go. It reports false, with
// nothing done and mu held, for a batch the journal cannot hold.
func (d *db) submitJournaled(pb *pebble.Batch, b *driver.Batch, k driver.LogKey, applied func(error)) (*driver.Handle, bool) {
	if !d.jr.fits(pb.Len() + journalSetMax) {
		return nil, false
	}
	var pos [8]byte
	binary.BigEndian.PutUint64(pos[:], d.jr.seq+1)
	_ = pb.Set(journalKey, pos[:], nil)
	repr := pb.Repr()
	if !d.jr.room(len(repr)) {
		// The records are about to be overwritten: each must be in the
		// WAL's file first.
		if err := d.guard("sync", func() error { return d.pdb.LogData(nil, pebble.Sync) }); err != nil {
			d.mu.Unlock()
			_ = pb.Close()
			return driver.Completed(driver.Result{}, fmt.Errorf("pebble: write: %w: %w", driver.ErrWriteFailed, err)), true
		}
		d.jr.restart()
	}
	// Copied before the apply, which may take a large batch's contents.
	d.jr.put(repr)
	n := len(repr)
	err := d.guard("apply", func() error { return d.pdb.Apply(pb, pebble.NoSync) })
	applied(err)
	if err != nil {
		d.mu.Unlock()
		return driver.Completed(driver.Result{}, err), true
	}
	d.jr.seal(n)
	if len(b.Log) > 0 {
		d.markDurable(k) // under mu: keys are journaled in order
	}
	d.mu.Unlock()
	_ = pb.Close()
	if len(b.Log) > 0 {
		d.notifier.Notify()
	}
	return driver.CompletedLog(k, len(b.Log)), true
}

// scanJournal returns the records of a journal's contents, in order: from
// the start while each checks out and follows the one before.
func scanJournal(b []byte) []journalRecord {
	var out []journalRecord
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
		if len(out) > 0 && seq != out[len(out)-1].seq+1 {
			break
		}
		// A journaled batch holds the journal's position at least: its
		// header (sequence number, count) and a count above zero.
		if n < batchHeader || binary.LittleEndian.Uint32(b[off+journalHeader+8:]) == 0 {
			break
		}
		out = append(out, journalRecord{seq: seq, repr: b[off+journalHeader : end]})
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

// replayJournal applies, with a write of the WAL each, the commits of the
// data directory's journal that the store lacks, and returns the last
// sequence number the store and the journal know. Journaled commits are
// applied only where they continue the store: records that start past the
// commit after the store's last (an operating-system crash kept a later
// part of the journal and not the part before) are left out, with a
// warning, rather than applied with a hole before them.
func replayJournal(pdb *pebble.DB, dir string, log *slog.Logger) (uint64, error) {
	last, err := journaledSeq(pdb)
	if err != nil {
		return 0, err
	}
	content, err := os.ReadFile(filepath.Join(dir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return last, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pebble: read the journal: %w", err)
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
	if applied > 0 {
		log.Info("commits completed before a crash applied again from the journal", "commits", applied)
	}
	if n := len(recs); n > 0 && recs[n-1].seq > last {
		// Numbers go on past those left out, and the store takes that
		// position, so the records written next follow it.
		last = recs[n-1].seq
		var pos [8]byte
		binary.BigEndian.PutUint64(pos[:], last)
		if err := pdb.Set(journalKey, pos[:], pebble.Sync); err != nil {
			return 0, fmt.Errorf("pebble: write the journal's position: %w", err)
		}
	}
	return last, nil
}

// applyJournalRecord applies r's batch with a write of the WAL. A batch
// Pebble cannot take, even by panicking, is an error wrapping
// driver.ErrCorrupt: the store stays as it was and does not open.
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
	if err := pdb.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: apply journal record %d: %w", r.seq, err)
	}
	return nil
}

// openJournal applies the data directory's journal to the store just
// opened and, under SyncNone and SyncInterval with journal_kb set,
// journals the commits after it; otherwise (under SyncAlways every commit
// waits for its sync anyway) it removes the journal once applied. On a reopen after a failed write the journal
// in use stays and starts over. Called while no commit runs (open, or a
// reopen while commits are refused).
func (d *db) openJournal() error {
	seq, err := replayJournal(d.pdb, d.opts.Dir, d.log)
	if err != nil {
		return err
	}
	if d.opts.Sync == driver.SyncAlways || d.jrSize == 0 {
		if err := os.Remove(filepath.Join(d.opts.Dir, journalName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pebble: remove the applied journal: %w", err)
		}
		return nil
	}
	if d.jr != nil {
		d.jr.seq = seq
		d.jr.restart()
		return nil
	}
	jr, err := openJournal(d.opts.Dir, d.jrSize, seq)
	if err != nil {
		return err
	}
	d.jr = jr
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
