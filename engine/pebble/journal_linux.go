//go:build linux && !nopebble

package pebble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// journal appends commit records to the data directory's journal file,
// mapped shared into memory (see journal.go). The file is two halves;
// records fill one, then the other, and a half is written over only once
// a flush of Pebble's memtables has made every record in it part of the
// store's tables. Its space is reserved on disk when it is created, so a
// store into the mapping never needs a block the file system cannot give.
// Used under the engine's mu, except sync.
type journal struct {
	f    *os.File
	mem  []byte
	half int    // the half records go to: 0 or 1
	off  int    // where the next record goes, within the half
	seq  uint64 // the last record's sequence number
	// flushed[h] is closed once a flush covering every record of half h
	// is done (nil: the half holds none the store may lack).
	flushed [2]<-chan struct{}
}

// openJournal maps the journal of dir, size bytes, creating it or giving
// it that size. It reports nil, with no error, where the file system
// cannot reserve space, and errJournalNoSpace where the disk has too
// little left: the engine then goes without a journal. The
// records already in the file stay until restart: read them before
// (readJournal) when the size changes, since a new size cuts or moves
// them.
func openJournal(dir string, size int) (*journal, error) {
	f, err := os.OpenFile(filepath.Join(dir, journalName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pebble: open the journal: %w", err)
	}
	fail := func(what string, err error) (*journal, error) {
		f.Close()
		return nil, fmt.Errorf("pebble: %s the journal: %w", what, err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail("stat", err)
	}
	if st.Size() > int64(size) {
		if err := f.Truncate(int64(size)); err != nil {
			return fail("resize", err)
		}
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil { //nolint:gosec // a descriptor fits an int
		f.Close()
		switch {
		case errors.Is(err, unix.ENOSPC):
			return nil, fmt.Errorf("%w: %w", errJournalNoSpace, err)
		case !preallocUnsupported(err):
			return nil, fmt.Errorf("pebble: reserve the journal's space: %w", err)
		}
		// A file system without fallocate: a store into a hole could
		// then meet a full disk as a fault, so go without the journal.
		_ = os.Remove(filepath.Join(dir, journalName))
		return nil, nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED) //nolint:gosec // a descriptor fits an int
	if err != nil {
		return fail("map", err)
	}
	return &journal{f: f, mem: mem}, nil
}

// halfLen is the size of each half.
func (j *journal) halfLen() int { return len(j.mem) / 2 }

// fits reports whether a record of a batch of n bytes fits in a half at
// all.
func (j *journal) fits(n int) bool { return journalHeader+n <= j.halfLen() }

// room reports whether a record of a batch of n bytes fits after the
// records written in the current half.
func (j *journal) room(n int) bool { return j.off+journalHeader+n <= j.halfLen() }

// at is where the next record goes in the mapping.
func (j *journal) at() int { return j.half*j.halfLen() + j.off }

// put copies repr, the batch of sequence number j.seq+1, into the next
// record, which room allows; seal completes the record. Between the two a
// crash leaves a record that fails its check.
func (j *journal) put(repr []byte) { copy(j.mem[j.at()+journalHeader:], repr) }

// seal writes the header of the record put holds, n bytes of batch.
func (j *journal) seal(n int) {
	j.seq++
	sealJournalRecord(j.mem[j.at():], j.seq, n)
	j.off += journalHeader + n
}

// next moves to the other half, which the caller made sure holds no
// record the store lacks; left is closed once the half left is flushed.
func (j *journal) next(left <-chan struct{}) {
	j.flushed[j.half] = left
	j.half ^= 1
	j.flushed[j.half] = nil
	j.off = 0
	// A record of the round before, left at the start, must not read as
	// the first of this one: it fails its check once zeroed.
	clear(j.mem[j.at() : j.at()+journalHeader])
}

// restart writes the next record at the start of the file, after seq:
// every record written is in the store's tables.
func (j *journal) restart(seq uint64) {
	j.seq = seq
	j.half, j.off = 0, 0
	j.flushed = [2]<-chan struct{}{}
	clear(j.mem[:journalHeader])
	clear(j.mem[j.halfLen() : j.halfLen()+journalHeader])
}

// sync writes the journal's records to the disk (SyncInterval's periodic
// sync).
func (j *journal) sync() error { return unix.Fdatasync(int(j.f.Fd())) } //nolint:gosec // a descriptor fits an int

// close unmaps and closes the journal.
func (j *journal) close() error {
	err := unix.Munmap(j.mem)
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
