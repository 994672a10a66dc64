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
//
// Under SyncAlways (written) the file is not mapped: each record is
// written with pwrite(2) and fdatasync(2) makes it durable. A page of a
// shared mapping that was written back faults on its next store, and on
// ext4 each such store made the next fdatasync several times slower
// (about 700 a second against 5,000 for pwrite into the same blocks).
// Used under the engine's mu, except sync.
type journal struct {
	f       *os.File
	mem     []byte // the mapping; nil when written
	size    int
	written bool
	buf     []byte // written: the record being put
	half    int    // the half records go to: 0 or 1
	off     int    // where the next record goes, within the half
	seq     uint64 // the last record's sequence number
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
//
// A written journal (written set) is not mapped: see journal.
func openJournal(dir string, size int, written bool) (*journal, error) {
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
	if written {
		return &journal{f: f, size: size, written: true}, nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED) //nolint:gosec // a descriptor fits an int
	if err != nil {
		return fail("map", err)
	}
	return &journal{f: f, mem: mem, size: size}, nil
}

// halfLen is the size of each half.
func (j *journal) halfLen() int { return j.size / 2 }

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
// crash leaves a record that fails its check (a mapped journal) or none
// (a written one, which writes the record at seal).
func (j *journal) put(repr []byte) {
	if !j.written {
		copy(j.mem[j.at()+journalHeader:], repr)
		return
	}
	if cap(j.buf) < journalHeader {
		j.buf = make([]byte, journalHeader, journalHeader+len(repr))
	}
	j.buf = append(j.buf[:journalHeader], repr...)
}

// maxJournalBuf bounds the record buffer a written journal keeps between
// records: a large batch leaves no large buffer behind.
const maxJournalBuf = 64 << 10

// seal writes the header of the record put holds, n bytes of batch, and
// a written journal's record. An error is a failed write: the record may
// be in the file in part, and fails its check if it is.
func (j *journal) seal(n int) error {
	if !j.written {
		j.seq++
		sealJournalRecord(j.mem[j.at():], j.seq, n)
		j.off += journalHeader + n
		return nil
	}
	sealJournalRecord(j.buf, j.seq+1, n)
	_, err := j.f.WriteAt(j.buf[:journalHeader+n], int64(j.at()))
	if cap(j.buf) > maxJournalBuf {
		j.buf = nil
	}
	if err != nil {
		return fmt.Errorf("pebble: write the journal: %w", err)
	}
	j.seq++
	j.off += journalHeader + n
	return nil
}

// clearHeader makes the record header at off read as none: a record of
// an earlier round left there must not read as one of this round.
func (j *journal) clearHeader(off int) error {
	if !j.written {
		clear(j.mem[off : off+journalHeader])
		return nil
	}
	var zero [journalHeader]byte
	if _, err := j.f.WriteAt(zero[:], int64(off)); err != nil {
		return fmt.Errorf("pebble: write the journal: %w", err)
	}
	return nil
}

// next moves to the other half, which the caller made sure holds no
// record the store lacks; left is closed once the half left is flushed.
func (j *journal) next(left <-chan struct{}) error {
	j.flushed[j.half] = left
	j.half ^= 1
	j.flushed[j.half] = nil
	j.off = 0
	// A record of the round before, left at the start, must not read as
	// the first of this one.
	return j.clearHeader(j.at())
}

// restart writes the next record at the start of the file, after seq:
// every record written is in the store's tables.
func (j *journal) restart(seq uint64) error {
	j.seq = seq
	j.half, j.off = 0, 0
	j.flushed = [2]<-chan struct{}{}
	return errors.Join(j.clearHeader(0), j.clearHeader(j.halfLen()))
}

// sync writes the journal's records to the disk: SyncInterval's periodic
// sync, and SyncAlways's sync of each group of commits.
func (j *journal) sync() error { return unix.Fdatasync(int(j.f.Fd())) } //nolint:gosec // a descriptor fits an int

// close unmaps and closes the journal.
func (j *journal) close() error {
	var err error
	if j.mem != nil {
		err = unix.Munmap(j.mem)
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
