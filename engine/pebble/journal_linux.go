//go:build linux && !nopebble

package pebble

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// journal appends commit records to the data directory's journal file,
// mapped shared into memory (see journal.go). Its space is reserved on
// disk when it is created, so a store into the mapping never needs a
// block the file system cannot give. Used under the engine's mu.
type journal struct {
	f   *os.File
	mem []byte
	off int    // where the next record goes
	seq uint64 // the last record's sequence number
}

// openJournal maps the journal of dir, size bytes, creating it or growing
// it to that size; its records are read before (replayJournal), and it
// starts over after seq.
func openJournal(dir string, size int, seq uint64) (*journal, error) {
	f, err := os.OpenFile(filepath.Join(dir, journalName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pebble: open the journal: %w", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil { //nolint:gosec // a descriptor fits an int
		if !preallocUnsupported(err) {
			f.Close()
			return nil, fmt.Errorf("pebble: reserve the journal's space: %w", err)
		}
		// A file system without fallocate: a store into a hole could
		// then meet a full disk as a fault, so go without the journal.
		f.Close()
		return nil, nil
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED) //nolint:gosec // a descriptor fits an int
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pebble: map the journal: %w", err)
	}
	j := &journal{f: f, mem: mem, seq: seq}
	j.restart()
	return j, nil
}

// fits reports whether a record of a batch of n bytes fits in the journal
// at all.
func (j *journal) fits(n int) bool { return journalHeader+n <= len(j.mem) }

// room reports whether a record of a batch of n bytes fits after the
// records written since the last restart.
func (j *journal) room(n int) bool { return j.off+journalHeader+n <= len(j.mem) }

// put copies repr, the batch of sequence number j.seq+1, into the next
// record, which room allows; seal completes the record. Between the two a
// crash leaves a record that fails its check.
func (j *journal) put(repr []byte) { copy(j.mem[j.off+journalHeader:], repr) }

// seal writes the header of the record put holds, n bytes of batch.
func (j *journal) seal(n int) {
	j.seq++
	sealJournalRecord(j.mem[j.off:], j.seq, n)
	j.off += journalHeader + n
}

// restart writes the next record at the start of the file: every record
// written is in the WAL.
func (j *journal) restart() {
	j.off = 0
	// A record of the round before, left at the start, must not read as
	// the first of this one: it fails its check once zeroed.
	clear(j.mem[:journalHeader])
}

// close unmaps and closes the journal.
func (j *journal) close() error {
	err := unix.Munmap(j.mem)
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	return err
}
