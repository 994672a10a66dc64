//go:build !nopebble

package pebble

import (
	"math"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// watchFS is the file system Pebble writes through. It reports the first
// failing write, sync or file creation to onErr as it happens, before
// Pebble sees the error: Pebble keeps a failed WAL writer's error and
// panics on the next commit into it, so the engine must stop committing
// as soon as a write fails, not when a commit's sync reports it. fault,
// when set (by this package's tests), fails chosen operations the way a
// full disk does.
//
// With walNoSync (SyncNone and SyncInterval) a sync of a WAL file does
// nothing unless forceSync is above zero (SyncInterval's periodic sync):
// the engine commits with a sync of the WAL in every mode, which has
// Pebble write each commit to the file before it completes, and only
// SyncAlways wants the fsync that comes with it.
type watchFS struct {
	vfs.FS
	onErr     func(error)
	fault     atomic.Pointer[func(op, name string) error]
	walNoSync bool
	forceSync atomic.Int32
}

func newWatchFS(onErr func(error)) *watchFS {
	return &watchFS{FS: vfs.Default, onErr: onErr}
}

// check runs the injected fault, if any, for op on name.
func (w *watchFS) check(op, name string) error {
	if f := w.fault.Load(); f != nil {
		return (*f)(op, name)
	}
	return nil
}

// seen reports err, if any, and returns it.
func (w *watchFS) seen(err error) error {
	if err != nil && w.onErr != nil {
		w.onErr(err)
	}
	return err
}

func (w *watchFS) wrap(f vfs.File, name string, err error) (vfs.File, error) {
	if err != nil {
		return nil, w.seen(err)
	}
	return &watchFile{File: f, fs: w, name: name, wal: strings.HasSuffix(name, ".log")}, nil
}

func (w *watchFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := w.check("create", name); err != nil {
		return nil, w.seen(err)
	}
	f, err := w.FS.Create(name, c)
	return w.wrap(f, name, err)
}

// OpenReadWrite and OpenDir open what exists; failing to find it is
// Pebble's to judge, not a failed write.
func (w *watchFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := w.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return nil, err
	}
	return w.wrap(f, name, nil)
}

func (w *watchFS) OpenDir(name string) (vfs.File, error) {
	f, err := w.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return w.wrap(f, name, nil)
}

func (w *watchFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := w.check("create", newname); err != nil {
		return nil, w.seen(err)
	}
	f, err := w.FS.ReuseForWrite(oldname, newname, c)
	return w.wrap(f, newname, err)
}

func (w *watchFS) Rename(oldname, newname string) error {
	if err := w.check("rename", newname); err != nil {
		return w.seen(err)
	}
	return w.seen(w.FS.Rename(oldname, newname))
}

func (w *watchFS) Link(oldname, newname string) error {
	if err := w.check("link", newname); err != nil {
		return w.seen(err)
	}
	return w.seen(w.FS.Link(oldname, newname))
}

// Unwrap returns the file system underneath, as vfs.FS asks.
func (w *watchFS) Unwrap() vfs.FS { return w.FS }

// walReserveStep is how much of a write-ahead log's space the engine
// reserves within the file at a time (see reserveWAL): each step costs
// one fdatasync that records a new file size, and a reopen after a crash
// reads through at most one step of zeros after the last record.
const walReserveStep = 4 << 20

// watchFile reports failing writes and syncs of one file.
type watchFile struct {
	vfs.File
	fs   *watchFS
	name string
	wal  bool // one of Pebble's write-ahead logs (NNNNNN.log)
	// off is where a write-ahead log's next write goes and reserved where
	// the space reserved within it ends; both are used only by the
	// goroutine that writes the log (Pebble's WAL writer).
	off, reserved int64
}

// reserve makes room for n more bytes of a write-ahead log within the
// file, a step at a time. A reservation that fails is not a failed write:
// the log is written without it, on a file system that cannot reserve
// space from then on, and on one short of a step's space until the write
// itself finds the disk full (which the engine reports).
func (f *watchFile) reserve(n int64) {
	if f.off+n <= f.reserved {
		return
	}
	// Whole steps, as many as the write needs past the reservation.
	step := (f.off + n - f.reserved + walReserveStep - 1) / walReserveStep * walReserveStep
	switch err := reserveWAL(f.File, f.reserved, step); {
	case err == nil:
		f.reserved += step
	case preallocUnsupported(err):
		f.reserved = math.MaxInt64
	}
}

// skipSync reports whether a sync of f does nothing (see watchFS).
func (f *watchFile) skipSync() bool {
	return f.wal && f.fs.walNoSync && f.fs.forceSync.Load() == 0
}

func (f *watchFile) Write(p []byte) (int, error) {
	if err := f.fs.check("write", f.name); err != nil {
		return 0, f.fs.seen(err)
	}
	if f.wal && reservesWAL {
		f.reserve(int64(len(p)))
	}
	n, err := f.File.Write(p)
	f.off += int64(n)
	return n, f.fs.seen(err)
}

func (f *watchFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.check("write", f.name); err != nil {
		return 0, f.fs.seen(err)
	}
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.seen(err)
}

func (f *watchFile) Preallocate(off, n int64) error {
	if err := f.fs.check("write", f.name); err != nil {
		return f.fs.seen(err)
	}
	if f.wal && reservesWAL {
		return nil // reserved within the file as it is written (see reserve)
	}
	err := f.File.Preallocate(off, n)
	if preallocUnsupported(err) {
		// Pebble writes without the reservation: not a failed write.
		return nil
	}
	return f.fs.seen(err)
}

func (f *watchFile) Sync() error {
	if err := f.fs.check("sync", f.name); err != nil {
		return f.fs.seen(err)
	}
	if f.skipSync() {
		return nil
	}
	return f.fs.seen(f.File.Sync())
}

func (f *watchFile) SyncData() error {
	if err := f.fs.check("sync", f.name); err != nil {
		return f.fs.seen(err)
	}
	if f.skipSync() {
		return nil
	}
	return f.fs.seen(f.File.SyncData())
}

func (f *watchFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.check("sync", f.name); err != nil {
		return false, f.fs.seen(err)
	}
	if f.skipSync() {
		return false, nil
	}
	full, err := f.File.SyncTo(length)
	return full, f.fs.seen(err)
}
